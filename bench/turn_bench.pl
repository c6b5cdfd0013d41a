#!/usr/bin/perl
# Turns with fleet-lmstub at zero delay.
#  - orchestration overhead per iteration: (Turn time at the client minus
#    the time the kernel spent in cells) / iterations, over 5-step Turns;
#    beside it the model's share, and a bare HTTP round trip to the stub
#    by curl (the baseline: one model call with no orchestration);
#  - the llm_query round trip from cell to cell (timed inside the cell);
#  - Turns per second through one worker and through two, 8 clients.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Fleet;
use Time::HiRes qw(time);

my $runs = $ENV{BENCH_RUNS} // 10;
my $script = <<'EOS';
{"match":"Step 5 of","repeat":true,"content":"```python\nSUBMIT(answer=str(x))\n```"}
{"match":"bench-iter","repeat":true,"content":"Next.\n```python\nx = 1\n```"}
{"match":"bench-llm","repeat":true,"content":"```python\nimport time\nts = []\nfor i in range(21):\n    t = time.perf_counter()\n    llm_query('ping')\n    ts.append((time.perf_counter() - t) * 1000)\nts.sort()\nSUBMIT(answer=f'{ts[10]:.3f}')\n```"}
{"match":"ping","repeat":true,"content":"pong"}
{"match":"bench-tps","repeat":true,"content":"```python\nSUBMIT(answer='ok')\n```"}
EOS

sub median { my @v = sort { $a <=> $b } @_; $v[$#v / 2] }

sub events {
	my ($path) = @_;
	open(my $fh, '<', $path) or return ();
	local $/ = "\n\n";
	return map { /^data: (.*)\n\n\z/s ? json_decode($1) : () }
	    grep { !/\[DONE\]/ } <$fh>;
}

sub start {
	my ($workers) = @_;
	my $f = Fleet->new(workers => $workers, extra => "max_iters = 6\n"
	    . "sandbox_warm = 2\nsandbox_max = 8\nmax_llm_calls = 100\n");
	my ($port) = $f->lmstub($script);
	local $ENV{FLEET_LM_BASE_URL} = "http://127.0.0.1:$port/v1";
	my ($rc, undef, $err) = $f->start;
	die "start: $err" if $rc;
	return ($f, $port);
}

my ($f, $port) = start(1);
# The worker's own clock (claim to commit, data-usage.duration_ms):
# the client's adds a curl process start.
sub usage_of {
	my ($text) = @_;
	# Let the warm pool refill first: its kernel boots would share the
	# two cores with the Turn.
	wait_for(sub { my $p = $f->status->{pool};
	    $p->{warm} == 2 && $p->{booting} == 0 }, 10);
	my ($body) = $f->turn_post($f->session, qq({"text":"$text"}));
	my ($u) = map { $_->{data}{usage} } grep { $_->{type} eq 'data-usage' }
	    events($body);
	die "no usage" unless $u;
	return $u;
}
my (@over, @lmshare, @turn, @one);
for my $i (1 .. $runs + 1) {
	my $u = usage_of('bench-iter');
	die "not 5 steps" unless $u->{iterations} == 5;
	my $o = usage_of('bench-tps');
	next if $i == 1;	# warm-up
	push @turn, $u->{duration_ms};
	push @over, ($u->{duration_ms} - $u->{execution_ms}) /
	    $u->{iterations};
	push @lmshare, $u->{lm_ms} / $u->{iterations};
	push @one, $o->{duration_ms};
}
# curl's own clock (time_total): the request alone, not curl's start.
my @raw;
for (1 .. 21) {
	my ($rc, $out) = run_cmd('curl', '-sS', '-o', '/dev/null', '-w',
	    '%{time_total}', '-H', 'content-type: application/json', '-d',
	    '{"model":"m","messages":[{"role":"user","content":"ping"}]}',
	    "http://127.0.0.1:$port/v1/chat/completions");
	die "stub: curl $rc" if $rc;
	push @raw, $out * 1000;
}
my @llm;
for (1 .. $runs) {
	my ($body) = $f->turn_post($f->session, '{"text":"bench-llm"}');
	my ($d) = map { $_->{delta} } grep { $_->{type} eq 'text-delta' }
	    events($body);
	push @llm, $d;
}
printf "5-step Turn, claim to commit:         median %7.2f ms (n=%d)\n",
    median(@turn), $runs;
printf "orchestration overhead per iteration: median %7.2f ms, of which "
    . "root model calls %.2f ms\n", median(@over), median(@lmshare);
printf "1-step Turn, claim to commit:         median %7.2f ms; marginal "
    . "cost of a step: %.2f ms\n", median(@one),
    (median(@turn) - median(@one)) / 4;
printf "baseline, bare HTTP round trip to the stub: median %.2f ms; "
    . "ratio %.1f\n", median(@raw), median(@over) / median(@raw);
printf "llm_query round trip, cell to cell:   median %7.2f ms "
    . "(medians of 21 calls in each of %d Turns); ratio to bare HTTP %.1f\n",
    median(@llm), $runs, median(@llm) / median(@raw);

# Turns per second, 8 clients.
my %tps;
for my $workers (1, 2) {
	($f) = start($workers) if $workers == 2;
	my @sids = map { $f->session } 1 .. 40;
	my $t0 = time;
	my @pids;
	for my $c (0 .. 7) {
		my $pid = fork // die;
		if ($pid == 0) {
			$f->{turns} = $c * 100;	# distinct body files
			for (my $k = $c; $k < 40; $k += 8) {
				$f->turn_post($sids[$k],
				    '{"text":"bench-tps"}');
			}
			exit 0;
		}
		push @pids, $pid;
	}
	waitpid($_, 0) for @pids;
	$tps{$workers} = 40 / (time - $t0);
	my (undef, $n) = $f->psql("SELECT count(*) FROM fleet_runs WHERE "
	    . "status = 'completed' AND idempotency_key LIKE 'key-%'");
	$f->stop;
	chomp $n;
	die "only $n of 40 Turns completed" if $n < 40;
	printf "Turns per second, %d worker(s), 8 clients: %.1f (40 of 40 "
	    . "completed)\n", $workers, $tps{$workers};
}
printf "ratio two workers / one: %.2f\n", $tps{2} / $tps{1};
