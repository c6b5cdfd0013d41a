#!/usr/bin/perl
# The embedded cluster: created on first start, private to a Unix
# socket, shown as role postgres, restarted after kill -9, reused with
# its data on the next start, stopped last.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 1);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);
ok(-f "$f->{state}/pg/data/PG_VERSION", 'cluster created in statedir/pg');
ok($f->log_wait(qr/creating the database cluster/, 1), 'by initdb');
if ($> == 0) {
	my $uid = (stat("$f->{state}/pg/data"))[4];
	my $name = getpwuid($uid);
	isnt($uid, 0, "as root, the cluster belongs to $name, not root");
	my ($pg) = $f->procs('postgres');
	is((stat("/proc/$pg->{pid}"))[4], $uid, 'and postgres runs as it');
}
my ($pg) = $f->procs('postgres');
ok($pg && $pg->{state} eq 'ready', 'status lists role postgres, ready');
($rc, $out) = $f->psql('SHOW listen_addresses');
is($out, "\n", 'no TCP listener');
ok(-S "$f->{state}/run/pg/.s.PGSQL.5432", 'a Unix socket in run/pg');
($rc, $out) = $f->psql("INSERT INTO fleet_sessions (id, workspace_id, "
    . "title) SELECT gen_random_uuid(), id, 'kept' FROM fleet_workspaces "
    . "RETURNING id");
is($rc, 0, 'write a row');

kill('KILL', $pg->{pid});
my $new = wait_for(sub {
	my ($q) = $f->procs('postgres');
	$q if $q->{pid} && $q->{pid} != $pg->{pid} && $q->{state} eq 'ready';
}, 20, 'postgres restart');
ok($new, 'postgres restarted after kill -9');
is($new->{restarts}, 1, 'restarts=1') if $new;
ok(wait_for(sub { $f->http('GET', '/health/ready')->{status} == 200 }, 20,
    'ready again'), 'service ready again (the others reconnected)');
($rc, $out) = $f->psql("SELECT count(*) FROM fleet_sessions WHERE "
    . "title = 'kept'");
is($out, "1\n", 'the row survived the crash');

($rc) = $f->stop;
is($rc, 0, 'stop');
my @lines = do { open(my $fh, '<', $f->logfile); <$fh> };
my ($last_child) = grep { /\) ended: / } reverse @lines;
like($last_child, qr/postgres \(pid \d+\) ended: exit 0/,
    'postgres is the last child to stop, cleanly');

unlink $f->logfile;
($rc, $out, $err) = $f->start;
is($rc, 0, 'started again') or diag($err);
ok(!$f->log_count(qr/creating the database cluster/),
    'the cluster is reused, not created again');
($rc, $out) = $f->psql("SELECT count(*) FROM fleet_sessions WHERE "
    . "title = 'kept'");
is($out, "1\n", 'with its data');
($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
