#!/usr/bin/perl
# Turns end to end: HTTP in, a scripted model (fleet-lmstub), real
# sandboxes, the SSE stream out, each checked against the stream grammar
# with the AI SDK's own parser (t/js/check-stream.mjs).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Digest::SHA qw(sha256_hex);
use Fleet;
use Test::More;

plan skip_all => 'bin/fleet-lmstub is not built'
    unless -x "$Fleet::BIN/fleet-lmstub";
my $checker = Fleet::have_checker();
diag('t/js/node_modules/ai missing: grammar checks skipped') unless $checker;

my $R = '"model":"root-model"';
my $S = '"model":"sub-model"';
my $script = <<"EOS";
{$R,"match":"case-sha","content":"Hash it.\\n```python\\nimport hashlib\\nh = hashlib.sha256(context.encode()).hexdigest()\\nprint(h)\\n```"}
{$R,"match":"case-sha","content":"Ask and submit.\\n```python\\na = llm_query('sub-one: say A')\\nb = llm_query_batched(['sub-two: say B', 'sub-three: say C'])\\nSUBMIT(answer=f'{h} {a} {b[0]} {b[1]}')\\n```"}
{$S,"match":"sub-one","content":"alpha"}
{$S,"match":"sub-two","content":"beta","delay_ms":300}
{$S,"match":"sub-three","content":"gamma"}
{$R,"match":"case-reask","content":"I would rather just talk about it."}
{$R,"match":"had no","content":"Sorry.\\n```py\\nSUBMIT(answer='after reask')\\n```"}
{$R,"match":"Give the final answer now","content":"extracted answer"}
{$R,"match":"case-iters","repeat":true,"content":"More.\\n```python\\nprint('still working')\\n```"}
{$R,"match":"case-limit","content":"Loop.\\n```python\\nout = []\\nfor i in range(5):\\n    try:\\n        out.append(llm_query(f'lim-{i}'))\\n    except Exception as e:\\n        out.append('ERR:' + str(e))\\nprint(out)\\n```"}
{$S,"match":"lim-","repeat":true,"content":"ok"}
{$R,"match":"case-limit","content":"Done.\\n```python\\nSUBMIT(answer=str(out.count('ok')) + ' ' + out[-1][:34])\\n```"}
{$R,"match":"case-429","status":429,"retry_after":1,"content":"slow down"}
{$R,"match":"case-429","content":"```python\\nSUBMIT(answer='after 429')\\n```"}
{$R,"match":"case-hostbad","content":"```python\\ntry:\\n    llm_query.__globals__['_host_call']('llm_query', '{}')\\n    r = 'no error'\\nexcept RuntimeError as e:\\n    r = str(e)\\nSUBMIT(answer=r)\\n```"}
{$R,"match":"case-cut","content":"This answer will be cut off in the middle of a sentence.","cut_after_chars":12,"chunk_chars":4}
{$R,"match":"case-big","content":"```python\\nimport hashlib\\nok = hashlib.sha256(open(attachments[0]['path'], 'rb').read()).hexdigest() == attachments[0]['sha256']\\nprint(len(context), ok)\\n```"}
{$R,"match":"case-big","content":"```python\\nSUBMIT(answer=f'{len(context)} {ok}')\\n```"}
{$R,"match":"case-sleep","repeat":true,"content":"Wait.\\n```python\\nimport time\\nprint('sleeping', flush=True)\\ntime.sleep(60)\\n```"}
{$R,"match":"case-after","content":"```python\\nSUBMIT(answer='alive')\\n```"}
EOS

my $f = Fleet->new(workers => 2, extra => "root_model = root-model\n"
    . "sub_model = sub-model\nmax_iters = 3\nmax_llm_calls = 3\n"
    . "heartbeat_seconds = 1\n");
my ($port, $lmlog) = $f->lmstub($script);
local $ENV{FLEET_LM_BASE_URL} = "http://127.0.0.1:$port/v1";
local $ENV{FLEET_LM_API_KEY} = 'sk-test-secret-key';
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

sub run_turn {
	my ($text, $expect, %o) = @_;
	my $sid = $o{sid} // $f->session;
	my $req = { text => $text };
	$req->{attachment_ids} = $o{attachments} if $o{attachments};
	my ($body, $head) = $f->turn_post($sid,
	    JSON::PP->new->canonical->encode($req), key => $o{key});
	my @ev = sse_events($body);
	is($ev[-1], '[DONE]', "$text: the stream ends with [DONE]");
	my %r = (sid => $sid, body => $body, events => \@ev,
	    chunks => [map { $_ eq '[DONE]' ? () : json_decode($_) } @ev]);
	my ($last) = grep { $_->{type} =~ /^(finish|abort)$/ } @{$r{chunks}};
	$r{terminal} = $last;
	($r{start}) = grep { $_->{type} eq 'start' } @{$r{chunks}};
	($r{text}) = map { $_->{delta} } grep { $_->{type} eq 'text-delta' }
	    @{$r{chunks}};
	($r{error}) = map { $_->{errorText} } grep { $_->{type} eq 'error' }
	    @{$r{chunks}};
	if ($checker) {
		my $sum = $f->check_stream($body, $head, $expect);
		is($sum->{rc}, 0, "$text: the stream keeps the grammar "
		    . "(finish $expect)") or diag($sum->{stderr});
	}
	return \%r;
}

# 1. An answer only executing the code can give; sub-model calls.
my $t = run_turn('case-sha: what is my sha256?', 'stop', key => 'sha-key');
my $want = sha256_hex('case-sha: what is my sha256?');
is($t->{text}, "$want alpha beta gamma",
    'the answer holds the SHA-256 computed in the sandbox and the sub '
    . 'model\'s answers, batch in order');
is($t->{terminal}{finishReason}, 'stop', 'finish(stop)');
my $run = $t->{start}{messageId};
like($run, qr/^[0-9a-f-]{36}$/, 'start carries the run id');
my @lm = $f->lmlog($lmlog);
my @subs = grep { $_->{body}{model} eq 'sub-model' } @lm;
is(scalar(grep { $_->{body}{messages}[-1]{content} =~ /sub-(one|two|three)/ }
    @subs), 3, 'llm_query and llm_query_batched went to the sub model');
my @roots = grep { $_->{body}{model} eq 'root-model' } @lm;
ok(@roots >= 2 && $roots[0]{body}{stream}, 'root calls stream');
my (undef, $st) = $f->psql("SELECT status, commit_checkpoint_version FROM "
    . "fleet_runs WHERE id = '$run'");
is($st, "completed|1\n", 'the Run is completed at checkpoint 1');
my $h = $f->http('GET', "/api/sessions/$t->{sid}/turns");
my $items = json_decode($h->{content})->{items};
is(scalar(@$items), 2, 'history: a user and an assistant message');
is($items->[0]{parts}[0]{text}, 'case-sha: what is my sha256?',
    'the user row holds the text');
is($items->[1]{id}, $run, 'the assistant row is the run');
my @ptypes = map { $_->{type} } @{$items->[1]{parts}};
is($ptypes[-1], 'text', 'its last part is the answer text');
is($items->[1]{parts}[-1]{text}, "$want alpha beta gamma",
    'with the committed answer');
ok((grep { $_ eq 'data-rlm-code' } @ptypes) == 2,
    'and both steps\' code');

# 2. A replay of the same key runs nothing and says so.
my $n = scalar($f->lmlog($lmlog));
my $rp = run_turn('case-sha: what is my sha256?', 'stop', sid => $t->{sid},
    key => 'sha-key');
is($rp->{text}, "$want alpha beta gamma", 'a replay gives the same answer');
is($rp->{start}{messageId}, $run, 'for the same run');
ok($rp->{terminal}{messageMetadata}{idempotentReplay},
    'marked idempotentReplay');
is($rp->{start}{messageMetadata}{delivery}, 'replay', 'delivery replay');
is(scalar($f->lmlog($lmlog)), $n, 'and without any model call');
my $mm = run_turn('case-sha: something else', 'error', sid => $t->{sid},
    key => 'sha-key');
is($mm->{error}, 'Idempotency key input mismatch',
    'the same key with other input is refused in-stream');
ok(!(grep { $_->{type} eq 'start' } @{$mm->{chunks}}), 'before any start');

# 3. A reply without code is asked again.
$t = run_turn('case-reask', 'stop');
is($t->{text}, 'after reask', 'answer after one re-ask');
my @rids = map { $_->{id} } grep { $_->{type} eq 'reasoning-start' }
    @{$t->{chunks}};
is(scalar(@rids), 2, 'two reasoning streams');
isnt($rids[0], $rids[1], 'with distinct ids');

# 4. max_iters spent: one extract call gives the answer.
$t = run_turn('case-iters', 'stop');
is($t->{text}, 'extracted answer', 'the extract call gives the answer');
is(scalar(grep { $_->{type} eq 'start-step' } @{$t->{chunks}}), 3,
    'after max_iters (3) steps');
my ($ex) = grep { ($_->{body}{messages}[-1]{content} // '') =~
    /Give the final answer now/ } $f->lmlog($lmlog);
ok($ex && !$ex->{body}{stream}, 'the extract call was made');

# 5. max_llm_calls spent: the cell gets the error, the Turn goes on.
$t = run_turn('case-limit', 'stop');
is($t->{text}, '3 ERR:LLM call limit exceeded: 3 + 1',
    'three calls answered, the fourth refused inside the cell');

# 6. 429 with Retry-After before the stream: retried.
$t = run_turn('case-429', 'stop');
is($t->{text}, 'after 429', 'the Turn succeeds after a 429');
my @l429 = grep { ($_->{body}{messages}[-1]{content} // '') =~ /case-429/ }
    $f->lmlog($lmlog);
is(scalar(@l429), 2, 'two requests: the 429 and the retry');
is($l429[0]{status}, 429, 'the first was the 429');

# A host request without its prompt is refused inside the cell.
$t = run_turn('case-hostbad', 'stop');
is($t->{text}, 'prompt must be a string',
    'llm_query without a prompt: an error the code can catch');

# 7. A stream cut mid-way: the Turn fails cleanly, without a retry.
$t = run_turn('case-cut', 'error');
is($t->{error}, 'Turn failed', 'a cut stream fails the Turn');
is($t->{terminal}{finishReason}, 'error', 'finish(error)');
my @lcut = grep { ($_->{body}{messages}[-1]{content} // '') =~ /case-cut/ }
    $f->lmlog($lmlog);
is(scalar(@lcut), 1, 'no retry once streaming started');
(undef, $st) = $f->psql("SELECT status || ':' || failure_code FROM "
    . "fleet_runs WHERE id = '$t->{start}{messageId}'");
is($st, "failed:execution_failed\n", 'the Run is settled failed');

# 8. A 10 MB attachment: the root prompts do not grow with it.
my $big = join('', map { sprintf("line %07d of the big file\n", $_) }
    0 .. 370369);
$big = substr($big, 0, 10_000_000);
my $bigfile = "$f->{dir}/big.txt";
open(my $bf, '>', $bigfile) or die;
print $bf $big;
close $bf;
($rc, $out, $err) = run_cmd('curl', '-sS', '-F', "attachment=\@$bigfile",
    "$f->{url}/api/attachments");
my $att = eval { json_decode($out) } // {};
is($att->{byte_size}, 10_000_000, 'a 10 MB attachment is uploaded')
    or diag("$out $err");
my $before = scalar($f->lmlog($lmlog));
$t = run_turn('case-big', 'stop', attachments => [$att->{id}]);
is($t->{text}, '10000000 True', 'the sandbox read all 10 MB and its '
    . 'checksum matched');
my @bigroots = grep { $_->{body}{model} eq 'root-model' }
    ($f->lmlog($lmlog))[$before .. scalar($f->lmlog($lmlog)) - 1];
ok(@bigroots >= 2, 'root calls were made');
my $maxlen = 0;
for (@bigroots) {
	my $l = length(JSON::PP->new->encode($_->{body}{messages}));
	$maxlen = $l if $l > $maxlen;
}
ok($maxlen < 12000, "every root prompt stays under 12000 bytes ($maxlen)");

# 9. Cancel during a long cell.
my $sid = $f->session;
my ($pid, $body) = $f->turn_post($sid, '{"text":"case-sleep one"}',
    background => 1);
my $started = sse_run_id($body, 30);
ok(wait_for(sub { grep { /data-rlm-output|sleeping/ } sse_events($body) }
    || wait_for(sub { grep { /data-rlm-code/ } sse_events($body) }, 30),
    30), 'the long cell is running');
my $t0 = time;
my $c = $f->http('PUT', "/api/runs/$started/cancellation");
is($c->{status}, 200, 'PUT cancellation');
is(json_decode($c->{content})->{state}, 'requested', 'state requested');
waitpid($pid, 0);
ok(time - $t0 < 20, 'the stream ended soon after');
my @ev = sse_events($body);
is($ev[-1], '[DONE]', 'with [DONE]');
like($ev[-2], qr/"type":"abort"/, 'after an abort');
if ($checker) {
	my $sum = $f->check_stream($body, undef, 'abort');
	is($sum->{rc}, 0, 'the cancelled stream keeps the grammar')
	    or diag($sum->{stderr});
}
ok(wait_for(sub { my (undef, $s) = $f->psql("SELECT status FROM fleet_runs "
    . "WHERE id = '$started'"); $s eq "cancelled\n" }, 10, 'cancelled'),
    'the Run is settled cancelled');

# 10. kill -9 of the worker mid-Turn.
$sid = $f->session;
($pid, $body) = $f->turn_post($sid, '{"text":"case-sleep two"}',
    background => 1);
my $run2 = sse_run_id($body, 30);
ok(wait_for(sub { grep { /data-rlm-code/ } sse_events($body) }, 30),
    'the long cell is running');
my $line = $f->log_wait(qr/run $run2 claimed/, 5);
my ($wpid) = $line =~ /fleetd\[(\d+)\]: turnworker/;
ok($wpid, "the worker running it is pid $wpid");
my $active = $f->status->{pool}{active};
$t0 = time;
kill('KILL', $wpid);
waitpid($pid, 0);
ok(time - $t0 < 10, 'the stream ended at once');
@ev = sse_events($body);
is($ev[-1], '[DONE]', 'with [DONE]');
like($ev[-3], qr/"type":"error","errorText":"Turn failed"/, 'an error');
like($ev[-2], qr/"finishReason":"error"/, 'and finish(error)');
if ($checker) {
	my $sum = $f->check_stream($body, undef, 'error');
	is($sum->{rc}, 0, 'that stream keeps the grammar')
	    or diag($sum->{stderr});
}
ok(wait_for(sub { my (undef, $s) = $f->psql("SELECT status || ':' || "
    . "failure_code FROM fleet_runs WHERE id = '$run2'");
    $s eq "failed:execution_failed\n" }, 10, 'settled'),
    'the Run is settled failed');
ok(wait_for(sub { $f->status->{pool}{active} < $active }, 10, 'lease'),
    'its sandbox is gone');
ok(wait_for(sub { my @w = $f->procs('turnworker');
    !grep { $_->{state} ne 'ready' } @w }, 10, 'worker back'),
    'the worker is restarted');
$t = run_turn('case-after', 'stop', sid => $sid);
is($t->{text}, 'alive', 'the next Turn in that Session succeeds');

# The key was sent, and never shows in a log line.
open(my $lf, '<', $f->logfile) or die;
ok(!grep({ /sk-test-secret-key/ } <$lf>), 'the API key is in no log line');

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
