#!/usr/bin/perl
# fleet db migrate and status; fleetd refusing a database not at head;
# two migrators at once; an external database means no embedded one;
# no password in any output or log line.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 1);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'embedded fleetd started') or BAIL_OUT($err);
for my $d (qw(m1 behind ahead conc)) {
	($rc, undef, $err) = $f->psql("CREATE DATABASE $d", db => 'postgres');
	is($rc, 0, "created database $d") or diag($err);
}
my @head = `ls $Fleet::TOP/sql/[0-9]*.sql`;
my $head = scalar @head;

sub db { my ($d, @args) = @_;
	local $ENV{FLEET_DATABASE_URL} = $f->conninfo($d);
	run_cmd($f->fleet_args, 'db', @args);
}

($rc, $out) = db('m1', 'status');
is($rc, 1, 'status of an empty database exits 1');
like($out, qr/schema version 0, head $head/, 'says version 0');
like($out, qr/^pending 0001_init$/m, 'lists the pending migration');

($rc, $out, $err) = db('m1', 'migrate');
is($rc, 0, 'migrate exits 0') or diag($err);
like($out, qr/^applied 0001_init$/m, 'applies 0001_init');
($rc, $out) = db('m1', 'migrate');
is($rc, 0, 'migrate again exits 0');
like($out, qr/nothing to do/, 'and does nothing');
unlike($out, qr/applied/, 'applies nothing');
($rc, $out) = db('m1', 'status');
is($rc, 0, 'status at head exits 0');
($rc, $out) = $f->psql('SELECT count(*), count(DISTINCT version) FROM '
    . 'fleet_schema_migrations', db => 'm1');
is($out, "$head|$head\n", 'each version recorded once');

# Two migrators at once: the advisory lock serialises them.
my @pids;
my $tmp = $f->{dir};
for my $i (1, 2) {
	my $pid = fork // die;
	if ($pid == 0) {
		$ENV{FLEET_DATABASE_URL} = $f->conninfo('conc');
		open(STDOUT, '>', "$tmp/conc$i.out") or die;
		open(STDERR, '>&', \*STDOUT) or die;
		exec($f->fleet_args, 'db', 'migrate') or die;
	}
	push @pids, $pid;
}
my @rcs = map { waitpid($_, 0); $? >> 8 } @pids;
is_deeply(\@rcs, [0, 0], 'two concurrent migrates both succeed');
my $applied = 0;
for my $i (1, 2) {
	open(my $fh, '<', "$tmp/conc$i.out") or die;
	$applied += grep { /^applied / } <$fh>;
}
is($applied, $head, 'between them each migration was applied once');
($rc, $out) = $f->psql('SELECT count(*) FROM fleet_schema_migrations',
    db => 'conc');
is($out, "$head\n", 'and recorded once');

# fleetd refuses a database that is not at head.
my $g = Fleet->new(workers => 1);
{
	local $ENV{FLEET_DATABASE_URL} = $f->conninfo('behind');
	($rc, $out, $err) = $g->start;
}
is($rc, 2, 'fleetd against a database behind head exits 2');
like($err, qr/schema version 0 but this fleet needs $head: run `fleet db migrate'/,
    'and says to run fleet db migrate');
ok(!-e $g->rundir . '/fleetd.sock', 'nothing left running');

($rc) = db('ahead', 'migrate');
$f->psql("INSERT INTO fleet_schema_migrations VALUES (9999, '9999_future')",
    db => 'ahead');
{
	local $ENV{FLEET_DATABASE_URL} = $f->conninfo('ahead');
	($rc, $out, $err) = $g->start;
}
is($rc, 2, 'a database ahead of head is refused too');
like($err, qr/newer than this fleet/, 'as newer');

# An external database: fleetd runs no postgres, and never shows the
# password (trust authentication ignores it).
my $url = "postgresql://fleet:hunter2secret\@/m1?host="
    . $f->{state} . '/run/pg';
{
	local $ENV{FLEET_DATABASE_URL} = $url;
	($rc, $out, $err) = $g->start;
	is($rc, 0, 'fleetd starts on an external database at head')
	    or diag($err);
	my @roles = map { $_->{role} } $g->procs;
	ok(!grep({ $_ eq 'postgres' } @roles), 'and runs no postgres');
	my $r = $g->http('GET', '/health/ready');
	is($r->{status}, 200, 'ready');
	like($r->{content}, qr/"database":"ok"/, 'database ok');
	($rc, $out, $err) = run_cmd($g->fleet_args, 'db', 'status');
	like($out, qr{fleet\@.*/m1}, 'db status names user and database');
	unlike("$out$err", qr/hunter2/, 'without the password');
	$g->stop;
}
open(my $lf, '<', $g->logfile) or die;
my @leaks = grep { /hunter2/ } <$lf>;
is(scalar @leaks, 0, 'no log line holds the password');

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
