#!/usr/bin/perl
# Configuration errors: file:line and exit 2; loopback-only binding;
# port in use; reload keeps the old config on error, applies a good one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use IO::Socket::INET;
use Test::More;

my $f = Fleet->new(config => "[fleet]\ndefault_profile = test\n"
    . "[profile test]\nworkers = two\nlisten = 127.0.0.1:0\n");
my ($rc, $out, $err) = $f->start;
is($rc, 2, 'bad config: fleet start exits 2');
like($err, qr/\Q$f->{conf}\E:4: workers: 'two' is invalid/,
    'and names file:line');
ok(!-e $f->rundir . '/fleetd.sock', 'nothing started');

$f->write_config("[profile default]\nlisten = 0.0.0.0:0\n");
($rc, $out, $err) = $f->start;
is($rc, 2, 'non-loopback listen is refused with exit 2');
like($err, qr/not a loopback address.*--allow-non-loopback-bind/,
    'and names the flag that allows it');
($rc, $out, $err) = $f->start('--allow-non-loopback-bind');
is($rc, 0, 'allowed with --allow-non-loopback-bind') or diag($err);
$f->stop;

my $squat = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
    LocalPort => 0, ReuseAddr => 1) or die;
my $port = $squat->sockport;
$f->write_config("[profile default]\nlisten = 127.0.0.1:$port\n");
($rc, $out, $err) = run_cmd($f->fleet_args, 'start');
is($rc, 1, 'port in use: exit 1');
like($err, qr/cannot listen on 127\.0\.0\.1 port $port: Address already in use/,
    'and says so');
close $squat;

$f->write_config("[fleet]\ndefault_profile = test\n[profile test]\n"
    . "listen = 127.0.0.1:0\nworkers = 2\nkill_timeout = 2\n");
($rc, $out, $err) = $f->start;
is($rc, 0, 'good config starts') or BAIL_OUT($err);
$f->write_config("[fleet]\ndefault_profile = test\n[profile test]\n"
    . "listen = 127.0.0.1:0\nworkers = 3\nbogus = 1\n");
($rc, $out, $err) = $f->fleet('reload');
is($rc, 1, 'reload of a bad config fails');
like($err, qr/configuration not reloaded: .*:6: unknown key 'bogus'/,
    'with file:line');
is(scalar($f->procs('turnworker')), 2, 'old config kept: two workers');
is($f->status->{state}, 'ready', 'still ready');

my @before = map { $_->{pid} } $f->procs('turnworker');
$f->write_config("[fleet]\ndefault_profile = test\n[profile test]\n"
    . "listen = 127.0.0.1:0\nworkers = 3\nkill_timeout = 2\n");
($rc, $out, $err) = $f->fleet('reload');
is($rc, 0, 'reload of a good config') or diag($err);
ok(wait_for(sub {
	my @w = $f->procs('turnworker');
	@w == 3 && !grep { $_->{state} ne 'ready' } @w;
}, 15, 'three ready workers'), 'a third worker is started');
ok(wait_for(sub {
	my %old = map { $_ => 1 } @before;
	!grep { $old{$_->{pid}} } $f->procs('turnworker');
}, 15, 'rolling replacement'), 'the old workers were replaced one by one');
is($f->http('GET', '/health/ready')->{status}, 200, 'ready throughout');

$f->write_config("[fleet]\ndefault_profile = test\n[profile test]\n"
    . "listen = 127.0.0.1:0\nworkers = 1\nkill_timeout = 2\n");
kill('HUP', $f->status->{pid});
ok(wait_for(sub { scalar($f->procs('turnworker')) == 1 }, 15,
    'shrink'), 'SIGHUP reloads too: down to one worker');
is($f->log_count(qr/turnworker \d+ \(pid \d+\) died/), 0,
    'no worker died along the way');
($rc) = $f->stop;
is($rc, 0, 'stop');

($rc, $out, $err) = run_cmd("$Fleet::BIN/fleetd", '-n', '-c', $f->{conf});
is($rc, 0, 'fleetd -n checks a good config');
like($err, qr/configuration OK/, 'and says OK');
done_testing;
