#!/usr/bin/perl
# The supervisor's edges: systemd readiness notification, private run
# directory and control socket, peer uid check, and children dying with
# a killed supervisor.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::UNIX;
use Socket qw(SOCK_DGRAM);
use Test::More;

my $f = Fleet->new;
my $nsdir = tempdir(CLEANUP => 1);
my $ns = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => "$nsdir/notify")
    or die "notify socket: $!";
{
	local $ENV{NOTIFY_SOCKET} = "$nsdir/notify";
	my ($rc, undef, $err) = $f->start;
	is($rc, 0, 'started with NOTIFY_SOCKET set') or BAIL_OUT($err);
}
my $msg = '';
ok(IO::Select->new($ns)->can_read(5) && defined($ns->recv($msg, 4096)),
    'a notification arrived');
is($msg, 'READY=1', 'READY=1 is sent to $NOTIFY_SOCKET');

# Root runs the embedded database as another user, who may pass
# through (not list) the run directory to reach its socket directory.
my @st = stat($f->rundir);
is($st[2] & 07777, $> == 0 ? 0711 : 0700,
    'run directory is mode ' . ($> == 0 ? '0711 (root)' : '0700'));
@st = stat($f->rundir . '/pg');
is($st[2] & 07777, 0700, 'database socket directory is mode 0700');
@st = stat($f->rundir . '/fleetd.sock');
is($st[2] & 0777, 0600, 'control socket is mode 0600');

# Another user who could reach the socket is still refused.
SKIP: {
	skip 'needs root and setpriv', 3 if $> != 0 || !-x '/usr/bin/setpriv';
	my $other = tempdir(CLEANUP => 1);
	chmod 0755, $other;
	mkdir "$other/run";
	chmod 0755, "$other/run";
	link($f->rundir . '/fleetd.sock', "$other/run/fleetd.sock") or die $!;
	chmod 0666, "$other/run/fleetd.sock";
	my ($rc, $out, $err) = run_cmd('/usr/bin/setpriv', '--reuid=65534',
	    '--regid=65534', '--clear-groups', "$Fleet::BIN/fleet", '-d',
	    $other, 'status');
	is($rc, 1, 'status as uid 65534 fails');
	like($err, qr/no answer from fleetd|send: (Broken pipe|Connection reset)/,
	    'fleetd closed the connection');
	ok($f->log_wait(qr/fleetd.sock: refused a connection from uid 65534/, 5),
	    'and logged the refusal');
	chmod 0600, $f->rundir . '/fleetd.sock';
}

# kill -9 of the supervisor: every child follows it.
my $st = $f->status;
my @kids = map { $_->{pid} } @{$st->{processes}};
kill('KILL', $st->{pid});
ok(wait_for(sub { !grep { !Fleet::pid_gone($_) } ($st->{pid}, @kids) }, 10,
    'children to die'), 'children die with a killed supervisor');
$f->{started} = 0;
my ($rc, undef, $err) = $f->start;
is($rc, 0, 'a new fleetd starts over the stale socket and pid file')
    or diag($err);
isnt($f->status->{pid}, $st->{pid}, 'with a new pid');
($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
