#!/usr/bin/perl
# A child that crashes at boot is restarted with a doubling backoff (no
# fork storm), fleet start reports it, and the service recovers once the
# cause is gone.  The gateway is made to crash by a directory squatting
# on its socket path, run/gateway.sock.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use File::Path qw(make_path remove_tree);
use Test::More;

my $f = Fleet->new(workers => 1);
make_path($f->rundir . '/gateway.sock/blocker');
my ($rc, $out, $err) = $f->start('--timeout', '20');
isnt($rc, 0, 'fleet start fails when a child crashes at boot');
like($err, qr/gateway died during startup \(exit 1\)/,
    'and says which child and how');
ok(!-e $f->rundir . '/fleetd.pid' && !-e $f->rundir . '/fleetd.sock',
    'and leaves no fleetd running behind');
my ($src) = run_cmd("$Fleet::BIN/fleet", '-c', $f->{conf}, '-d', $f->{state},
    'status');
is($src, 3, 'status says not running (exit 3)');

# Now run fleetd in the foreground and watch the backoff.
unlink $f->logfile;
my $pid = fork // die;
if ($pid == 0) {
	open(STDERR, '>>', $f->logfile) or die;
	open(STDOUT, '>', '/dev/null') or die;
	exec("$Fleet::BIN/fleetd", '-D', '-c', $f->{conf}, '-d', $f->{state},
	    '-P', '0') or die;
}
ok($f->log_wait(qr/restarting it in 4 s/, 15), 'third quick death: 4 s');
my $deaths = $f->log_count(qr/gateway \(pid \d+\) died after/);
is($deaths, 3, 'exactly three gateway deaths by then: no fork storm');
my @waits = map { /restarting it in (\d+) s/ ? $1 : () }
    do { open(my $fh, '<', $f->logfile); <$fh> };
is_deeply(\@waits, [1, 2, 4], 'backoff doubles: 1, 2, 4 s');
my $st = $f->status;
my ($gw) = grep { $_->{role} eq 'gateway' } @{$st->{processes}};
is($gw->{state}, 'backoff', 'status shows the gateway in backoff');
is($gw->{restarts}, 3, 'with restarts=3');
is($st->{state}, 'starting', 'supervisor is still starting');

remove_tree($f->rundir . '/gateway.sock');
ok(wait_for(sub { ($f->status // {})->{state} eq 'ready' }, 15,
    'recovery'), 'once the cause is gone the gateway comes up and '
    . 'fleetd is ready');
kill('TERM', $pid);
waitpid($pid, 0);
is($?, 0, 'fleetd exits 0 on SIGTERM');
done_testing;
