#!/usr/bin/perl
# fleet start waits for readiness; status lists every role; titles; health.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 2);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'fleet start exits 0') or diag($err);
like($out, qr{^http://127\.0\.0\.1:\d+\n\z}, 'prints the base URL');

my $r = $f->http('GET', '/health');
is($r->{status}, 200, '/health answers 200');
my $h = json_decode($r->{content});
is_deeply([@$h{qw(status app)}], ['ok', 'fleet'], '/health body');
like($h->{version}, qr/^\d+\.\d+\.\d+$/, '/health has a version');
like($r->{headers}{'content-type'}, qr{^application/json}, 'JSON type');

$r = $f->http('GET', '/health/ready');
is($r->{status}, 200, '/health/ready is 200 once start returned');
is_deeply(json_decode($r->{content}), { status => 'ready',
    database => 'ok' }, 'ready body, database ok');

$r = $f->http('GET', '/nope');
is($r->{status}, 404, 'unknown route is 404');
is(json_decode($r->{content})->{code}, 'not_found', 'error envelope code');
$r = $f->http('POST', '/health');
is($r->{status}, 405, 'wrong method on /health is 405');

my $st = $f->status;
ok($st, 'status --json parses');
is($st->{state}, 'ready', 'state ready');
ok($st->{pid} > 1, 'supervisor pid');
ok(defined $st->{uptime_s}, 'supervisor uptime');
my %roles;
for my $p (@{$st->{processes}}) {
	$roles{$p->{role}}++;
	ok($p->{pid} > 1 && $p->{state} eq 'ready' && $p->{restarts} == 0
	    && defined $p->{uptime_s},
	    "$p->{role} $p->{instance}: pid, ready, no restarts, uptime");
}
is_deeply(\%roles, { postgres => 1, gateway => 1, leasemgr => 1,
    turnworker => 2 }, 'every role is listed, with two turnworkers');

# Process titles, as ps shows them (postgres names itself).
for my $p (grep { $_->{role} ne 'postgres' } @{$st->{processes}}) {
	open(my $fh, '<', "/proc/$p->{pid}/cmdline") or die;
	my $cmd = <$fh>;
	$cmd =~ s/\0+$//;
	my $want = $p->{role} eq 'turnworker'
	    ? "fleetd: turnworker $p->{instance}" : "fleetd: $p->{role}";
	is($cmd, $want, "title of $p->{role} $p->{instance}");
}

($rc, $out, $err) = $f->fleet('status');
is($rc, 0, 'human status exits 0');
like($out, qr/^fleetd \S+: ready, pid $st->{pid}/, 'human status headline');
like($out, qr/^turnworker 2\s+\d+\s+ready/m, 'human status rows');

($rc, $out, $err) = $f->fleet('start', '--port', '0');
isnt($rc, 0, 'starting twice fails');
like($err, qr/already running \(pid $st->{pid}/, 'and names the running pid');

# The pid file is written once ready.
open(my $pf, '<', $f->rundir . '/fleetd.pid') or die;
chomp(my $pidline = <$pf> // '');
is($pidline, $st->{pid}, 'pid file holds the supervisor pid');

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
