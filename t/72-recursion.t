#!/usr/bin/perl
# rlm_query: a child RLM, one level deep, in a sandbox of its own, whose
# own rlm_query falls back to the sub-model; and a client that goes
# away cancels its Run.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

plan skip_all => 'bin/fleet-lmstub is not built'
    unless -x "$Fleet::BIN/fleet-lmstub";
my $checker = Fleet::have_checker();

my $script = <<'EOS';
{"match":"case-rec","content":"Delegate.\n```python\nr = rlm_query('child-task: add two and two', context='numbers: 2, 2')\nSUBMIT(answer=r)\n```"}
{"match":"child-task","content":"I am the child.\n```python\ng = rlm_query('grand-task: say hi')\nprint(context)\nSUBMIT(answer=str(2 + 2) + ' / ' + g)\n```"}
{"match":"grand-task","content":"sub answered"}
{"match":"case-off","content":"```python\ntry:\n    rlm_query('x')\nexcept Exception as e:\n    SUBMIT(answer='refused: ' + str(e))\n```"}
{"match":"case-leave","repeat":true,"content":"```python\nimport time\ntime.sleep(60)\n```"}
EOS

my $f = Fleet->new(workers => 1, extra => "recursion_enabled = true\n"
    . "sandbox_warm = 1\n");
my ($port) = $f->lmstub($script);
local $ENV{FLEET_LM_BASE_URL} = "http://127.0.0.1:$port/v1";
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started with recursion enabled') or BAIL_OUT($err);

my $created = $f->status->{pool}{created_total};
my ($body, $head) = $f->turn_post($f->session, '{"text":"case-rec"}');
my @ev = map { $_ eq '[DONE]' ? () : json_decode($_) } sse_events($body);
my ($text) = map { $_->{delta} } grep { $_->{type} eq 'text-delta' } @ev;
is($text, '4 / sub answered', 'the child answered, and its own rlm_query '
    . 'went to the sub-model');
my @cp = map { $_->{data} } grep { $_->{type} eq 'data-child-progress' } @ev;
is_deeply([map { $_->{state} } @cp], ['running', 'completed'],
    'data-child-progress: running, then completed');
like($cp[-1]{outcome} // '', qr/^4 \/ sub answered/, 'with its outcome');
is($cp[0]{task_label}, 'child-task: add two and two', 'and its task');
ok($f->status->{pool}{created_total} >= $created + 2,
    'the child ran in a sandbox of its own');
if ($checker) {
	my $sum = $f->check_stream($body, $head, 'stop');
	is($sum->{rc}, 0, 'the stream keeps the grammar') or diag($sum->{stderr});
}

# A client that goes away cancels the Run.
my $sid = $f->session;
my ($pid, $b2) = $f->turn_post($sid, '{"text":"case-leave"}', background => 1);
my $run = sse_run_id($b2, 30);
ok(wait_for(sub { grep { /data-rlm-code/ } sse_events($b2) }, 30),
    'a long cell is running');
my $active = $f->status->{pool}{active};
kill('KILL', $pid);
waitpid($pid, 0);
ok(wait_for(sub { my (undef, $s) = $f->psql("SELECT status FROM fleet_runs "
    . "WHERE id = '$run'"); $s eq "cancelled\n" }, 15, 'cancelled'),
    'the disconnect cancelled the Run');
ok(wait_for(sub { $f->status->{pool}{active} < $active }, 10, 'freed'),
    'and its sandbox went');
ok($f->log_wait(qr/the client disconnected/, 5), 'the gateway logged it');
($rc) = $f->stop;
is($rc, 0, 'stop');

# Without recursion, rlm_query is an error in the cell.
my $g = Fleet->new(workers => 1);
($port) = $g->lmstub($script);
local $ENV{FLEET_LM_BASE_URL} = "http://127.0.0.1:$port/v1";
($rc, undef, $err) = $g->start;
is($rc, 0, 'started without recursion') or BAIL_OUT($err);
($body) = $g->turn_post($g->session, '{"text":"case-off"}');
($text) = map { json_decode($_)->{delta} } grep { /"text-delta"/ }
    sse_events($body);
like($text, qr/^refused: rlm_query is not enabled/, 'rlm_query is refused');
($rc) = $g->stop;
is($rc, 0, 'stop');
done_testing;
