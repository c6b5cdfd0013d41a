#!/usr/bin/perl
# Limits and operations around Turns: a cell past execution_timeout is
# interrupted; a busy worker queues Turns with prelude heartbeats and a
# full queue refuses; drain --wait waits for a Turn in flight; fleet
# turn's exit codes; an unrenewed lease is revoked.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Test::More;

plan skip_all => 'bin/fleet-lmstub is not built'
    unless -x "$Fleet::BIN/fleet-lmstub";
my $tool = "$Fleet::TOP/obj/t/tools/leasetool";

my $script = <<'EOS';
{"match":"case-loop","content":"Spin.\n```python\nwhile True:\n    pass\n```"}
{"match":"case-loop","content":"```python\nSUBMIT(answer='survived')\n```"}
{"match":"case-hold","delay_ms":6000,"content":"```python\nSUBMIT(answer='held')\n```"}
{"match":"case-queued","content":"```python\nSUBMIT(answer='queued ran')\n```"}
{"match":"case-drain","delay_ms":2000,"content":"```python\nSUBMIT(answer='drained ok')\n```"}
{"match":"case-cli","content":"```python\nSUBMIT(answer=str(6 * 7))\n```"}
{"match":"case-404","status":404,"content":"The model `x` does not exist"}
{"match":"case-reload","delay_ms":1500,"content":"```python\nSUBMIT(answer='reloaded')\n```"}
{"match":"case-requeued","content":"```python\nSUBMIT(answer='requeued ran')\n```"}
{"match":"case-push","delay_ms":1500,"content":"```python\nSUBMIT(answer='pushed')\n```"}
{"match":"case-sigint","delay_ms":20000,"content":"```python\nSUBMIT(answer='too late')\n```"}
EOS

my $f = Fleet->new(workers => 1, extra => "execution_timeout = 1\n"
    . "turn_queue_max = 1\nheartbeat_seconds = 1\nlease_ttl = 5\n");
my ($port, $lmlog) = $f->lmstub($script);
local $ENV{FLEET_LM_BASE_URL} = "http://127.0.0.1:$port/v1";
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

sub answer {
	my ($path) = @_;
	for (sse_events($path)) {
		return json_decode($_)->{delta} if /"type":"text-delta"/;
	}
	return undef;
}

# A cell past execution_timeout is interrupted; the Turn goes on.
my ($body) = $f->turn_post($f->session, '{"text":"case-loop"}');
is(answer($body), 'survived', 'the Turn survives a runaway cell');
my ($output) = grep { /"type":"data-rlm-output"/ } sse_events($body);
like($output, qr/KeyboardInterrupt/, 'the cell was interrupted');
like($output, qr/longer than execution_timeout \(1 s\)/,
    'and its output says why');

# One worker: a second Turn queues with heartbeats, a third is refused.
my ($pa, $ba) = $f->turn_post($f->session, '{"text":"case-hold"}',
    background => 1);
ok(wait_for(sub { $f->status->{turns}{active} == 1 }, 10, 'A active'),
    'the first Turn holds the only worker');
my ($pb, $bb) = $f->turn_post($f->session, '{"text":"case-queued"}',
    background => 1);
ok(wait_for(sub { $f->status->{turns}{queued} == 1 }, 10, 'B queued'),
    'the second waits in the queue');
my ($bc) = $f->turn_post($f->session, '{"text":"case-refused"}');
my @c = sse_events($bc);
like($c[-3] // '', qr/"errorText":"Turn is unavailable"/,
    'the third is refused in-stream: the queue is full');
ok(!grep({ /"type":"start"/ } @c), 'without a start');
ok(wait_for(sub { (grep { /"phase":"preparation"/ } sse_events($bb)) >= 3 },
    10, 'heartbeats'), 'the queued Turn gets the prelude as a heartbeat');
waitpid($pa, 0);
is(answer($ba), 'held', 'the first Turn completes');
waitpid($pb, 0);
is(answer($bb), 'queued ran', 'then the queued one runs');
my @b = sse_events($bb);
my ($first_start) = grep { $b[$_] =~ /"type":"start"/ } 0 .. $#b;
ok(!grep({ $b[$_] =~ /"phase":"preparation"/ } $first_start .. $#b),
    'and no prelude follows its start');

# A reload replaces the worker after its Turn: the queued Turn waits for
# the new worker instead of going to the leaving one.
my $oldpid = ($f->procs('turnworker'))[0]{pid};
my ($pe, $be) = $f->turn_post($f->session, '{"text":"case-reload"}',
    background => 1);
ok(wait_for(sub { $f->status->{turns}{active} == 1 }, 10, 'E active'),
    'a Turn holds the only worker');
my ($pq, $bq) = $f->turn_post($f->session, '{"text":"case-requeued"}',
    background => 1);
ok(wait_for(sub { $f->status->{turns}{queued} == 1 }, 10, 'Q queued'),
    'another waits in the queue');
($rc, undef, $err) = $f->fleet('reload');
is($rc, 0, 'reload') or diag($err);
waitpid($pe, 0);
is(answer($be), 'reloaded', 'the Turn in flight completes');
waitpid($pq, 0);
is(answer($bq), 'requeued ran', 'the queued Turn runs on the new worker');
isnt(($f->procs('turnworker'))[0]{pid}, $oldpid, 'which replaced the old');

# drain --wait waits for the Turn in flight; new Turns are refused.
my ($pd, $bd) = $f->turn_post($f->session, '{"text":"case-drain"}',
    background => 1);
ok(wait_for(sub { $f->status->{turns}{active} == 1 }, 10, 'D active'),
    'a Turn is in flight');
my $t0 = time;
my $dpid = fork // die;
if ($dpid == 0) {
	open(STDOUT, '>', "$f->{dir}/drain.out");
	exec($f->fleet_args, 'drain', '--wait', '--timeout', '30') or die;
}
ok(wait_for(sub { $f->status->{state} eq 'draining' }, 10, 'draining'),
    'fleetd is draining');
my ($br) = $f->turn_post($f->session, '{"text":"case-cli"}');
like((sse_events($br))[-3] // '', qr/Turn is unavailable/,
    'a new Turn is refused while draining');
waitpid($dpid, 0);
is($? >> 8, 0, 'drain --wait returned 0');
waitpid($pd, 0);
is(answer($bd), 'drained ok', 'after the Turn in flight completed');
open(my $dfh, '<', "$f->{dir}/drain.out");
like(scalar(<$dfh>) // '', qr/drained/, 'and said drained');
($rc) = $f->fleet('undrain');
is($rc, 0, 'undrain');

# fleet turn: 0 with the answer, 1 with the reason, 130 on Ctrl-C.
($rc, $out, $err) = $f->fleet('turn', '-q', 'case-cli: what is 6 x 7?');
is($rc, 0, 'fleet turn exits 0 on finish(stop)');
is($out, "42\n", 'and prints the answer');
($rc, $out, $err) = $f->fleet('turn', 'case-404');
is($rc, 1, 'fleet turn exits 1 on a failed Turn');
like($err, qr/Provider endpoint not found; check model and base URL/,
    'with the public reason');
my $cpid = fork // die;
if ($cpid == 0) {
	open(STDOUT, '>', '/dev/null');
	open(STDERR, '>', "$f->{dir}/sigint.err");
	exec($f->fleet_args, 'turn', 'case-sigint') or die;
}
ok(wait_for(sub { my (undef, $n) = $f->psql("SELECT count(*) FROM fleet_runs "
    . "WHERE status = 'running'"); $n == 1 }, 10, 'running'),
    'the Turn is running');
kill('INT', $cpid);
waitpid($cpid, 0);
is($? >> 8, 130, 'fleet turn exits 130 on Ctrl-C');
ok(wait_for(sub { my (undef, $s) = $f->psql("SELECT status FROM fleet_runs "
    . "ORDER BY created_at DESC LIMIT 1"); $s eq "cancelled\n" }, 10,
    'cancelled'), 'and the Run is cancelled');

# A client that keeps sending during its stream is not buffered without
# bound: the gateway stops reading it, and the stream still completes.
{
	my ($gw) = $f->procs('gateway');
	my $hwm = sub {
		open(my $fh, '<', "/proc/$gw->{pid}/status") or die;
		for (<$fh>) { return $1 if /^VmHWM:\s+(\d+) kB/ }
		die 'no VmHWM';
	};
	my $before = $hwm->();
	my ($host, $hport) = $f->{url} =~ m{//([^:/]+):(\d+)};
	my $sock = IO::Socket::INET->new(PeerAddr => $host,
	    PeerPort => $hport) or die "connect: $!";
	my $sid = $f->session;
	my $req = '{"text":"case-push"}';
	print $sock "POST /api/sessions/$sid/turns HTTP/1.1\r\nHost: x\r\n"
	    . "Content-Type: application/json\r\nIdempotency-Key: push-$$\r\n"
	    . 'Content-Length: ' . length($req) . "\r\n\r\n$req";
	my $ppid = fork // die;
	if ($ppid == 0) {
		$SIG{PIPE} = 'IGNORE';
		my $junk = 'x' x 65536;
		for (1 .. 1024) { syswrite($sock, $junk) or last }
		POSIX::_exit(0);
	}
	my $got = '';
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm(30);
		while (sysread($sock, my $buf, 65536)) {
			$got .= $buf;
			last if $got =~ /data: \[DONE\]/;
		}
		alarm(0);
	};
	my $after = $hwm->();
	kill('KILL', $ppid);
	waitpid($ppid, 0);
	close $sock;
	like($got, qr/"delta":"pushed"/, 'a client sending 64 MiB mid-stream '
	    . 'still gets its answer');
	cmp_ok($after - $before, '<', 16384, 'and the gateway did not buffer '
	    . 'it (peak RSS grew ' . ($after - $before) . ' KiB)');
}

# A lease nobody renews is revoked, and its sandbox destroyed.
SKIP: {
	skip "$tool is not built", 4 unless -x $tool;
	pipe(my $r, my $w) or die;
	pipe(my $ir, my $iw) or die;
	my $lpid = fork // die;
	if ($lpid == 0) {
		close $r;
		close $iw;
		open(STDOUT, '>&', $w) or die;
		open(STDIN, '<&', $ir) or die;
		exec($tool, '-r', $f->rundir, '-w',
		    '7793d159-223b-5feb-a99c-f7696debb478') or die;
	}
	close $w;
	my $g = <$r>;
	like($g, qr/"event":"granted"/, 'a lease is granted');
	my $active = $f->status->{pool}{active};
	kill('STOP', $lpid);
	ok($f->log_wait(qr/was not renewed within 5 s; revoking it/, 15),
	    'the stopped holder does not renew: the lease is revoked');
	ok(wait_for(sub { $f->status->{pool}{active} < $active }, 10,
	    'freed'), 'and its slot freed');
	kill('CONT', $lpid);
	my $l = <$r>;
	like($l // '', qr/"event":"lost"/, 'the holder learns it lost it');
	close $iw;
	waitpid($lpid, 0);
}

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
