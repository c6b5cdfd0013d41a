#!/usr/bin/perl
#
# t/js/check-stream.mjs, the Turn stream checker built on the real AI SDK,
# proven against hand-made bodies in t/js/fixtures: every valid body passes
# with the expected summary, every invalid one fails naming exactly the
# rules it breaks (and the chunk), and the --url mode checks status, head
# and body of a real HTTP answer.
# Run from the repository root: prove t/55-streamcheck.t

use strict;
use warnings;
use utf8;

use Cwd ();
use File::Spec;
use File::Temp qw(tempdir);
use FindBin;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Test::More;

my $root = Cwd::abs_path("$FindBin::Bin/..");
my $js = "$root/t/js";
my $checker = "$js/check-stream.mjs";
my $fix = "$js/fixtures";

plan skip_all => 't/js/node_modules/ai missing (run: cd t/js && npm ci)'
    unless -d "$js/node_modules/ai";
my ($node) = grep { -x } map { File::Spec->catfile($_, 'node') }
    File::Spec->path;
plan skip_all => 'node not found in PATH' unless $node;

binmode(Test::More->builder->$_, ':encoding(UTF-8)')
    for qw(output failure_output todo_output);

my $dir = tempdir('streamcheck-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $json = JSON::PP->new->utf8->canonical;
my $nrun = 0;

sub slurp {
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or die "$path: $!";
	local $/;
	return scalar <$fh>;
}

# Run the checker; returns { rc, out, err, json (decoded stdout or undef) }.
sub check {
	my (@args) = @_;
	my ($out, $err) = map { sprintf('%s/%s%d', $dir, $_, ++$nrun) }
	    qw(out err);
	my $pid = fork() // die "fork: $!";
	if ($pid == 0) {
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', $out) or POSIX::_exit(126);
		open(STDERR, '>', $err) or POSIX::_exit(126);
		exec($node, $checker, @args) or POSIX::_exit(127);
	}
	waitpid($pid, 0);
	my $r = { rc => $? >> 8, sig => $? & 127, out => slurp($out),
	    err => slurp($err) };
	$r->{json} = eval { $json->decode($r->{out}) };
	utf8::decode($r->{err});
	return $r;
}

my $RUN = '0190f3a2-7c41-7d2e-9a55-1b2c3d4e5f60';

# ---------------------------------------------------------------- valid

my %valid = (
	'valid-success' => {
		expect => 'stop',
		summary => {
			ok => JSON::PP::true, messageId => $RUN,
			finishReason => 'stop', chunks => 25,
			text => "The answer is 42. \x{2713}",
			reasoning => ['Let me compute this.',
			    'Verified; submitting.'],
			code => ["x = 6 * 7\nprint(x)", 'SUBMIT(answer=str(x))'],
			outputs => ["42\n", ''],
			error => undef,
			usage => { usage => { iterations => 2,
			    duration_ms => 1234, observed_lm_usage => {
			    prompt_tokens => 120, completion_tokens => 48 } } },
		},
		types => [qw(data-status data-status start data-status),
		    (qw(start-step reasoning-start reasoning-delta
		    reasoning-delta reasoning-end data-rlm-code
		    data-rlm-output finish-step)) x 2,
		    qw(data-usage text-start text-delta text-end finish)],
	},
	'valid-rich' => {
		expect => 'stop',
		summary => { finishReason => 'stop', chunks => 27,
		    text => "The answer is 42. \x{2713}", code => ['print(1)'],
		    outputs => ['1'], reasoning => ['a'] },
		types => [qw(data-status start data-skill data-attachment
		    start-step reasoning-start reasoning-delta reasoning-end
		    data-rlm-code data-rlm-output finish-step start-step
		    tool-input-available tool-output-available
		    tool-input-available tool-output-error data-child-progress
		    data-warning finish-step data-artifact data-artifact
		    data-usage data-structured-result text-start text-delta
		    text-end finish)],
	},
	'valid-replay' => {
		expect => 'stop',
		summary => { finishReason => 'stop', chunks => 23,
		    messageId => $RUN, text => "The answer is 42. \x{2713}" },
	},
	'valid-open-failure' => {
		expect => 'error',
		summary => { finishReason => 'error', chunks => 4,
		    messageId => undef, error => 'A Turn is already running',
		    text => '', usage => undef },
		types => [qw(data-status data-status error finish)],
	},
	'valid-post-start-failure' => {
		expect => 'error',
		summary => { finishReason => 'error', chunks => 8,
		    messageId => $RUN, error => 'Turn failed',
		    reasoning => ['hmm'] },
	},
	'valid-cancel' => {
		expect => 'abort',
		summary => { finishReason => 'abort', chunks => 12,
		    abortReason => 'Turn cancelled', error => undef,
		    code => ["x = 6 * 7\nprint(x)"] },
	},
	'valid-cancel-prestart' => {
		expect => 'abort',
		summary => { finishReason => 'abort', chunks => 2,
		    messageId => undef, abortReason => 'Turn cancelled' },
		types => [qw(data-status abort)],
	},
);

# ---------------------------------------------------------------- invalid
#
# fixture => [rule, chunk index ('' = not chunk-bound)] for every violation
# the checker must report -- exactly these, no more.

my %invalid = (
	# framing / [DONE]
	'bad-done-missing' => [['done.missing', '']],
	'bad-done-twice' => [['done.trailing', 25], ['done.duplicate', 25]],
	'bad-trailing-after-done' => [['done.trailing', 25]],
	'bad-done-before-finish' => [['done.trailing', 24],
	    ['done.before-terminal', 24]],
	'bad-no-final-blank-line' => [['framing.unterminated', ''],
	    ['done.missing', '']],
	'bad-event-line' => [['framing.field', '']],
	'bad-id-line' => [['framing.field', '']],
	'bad-crlf' => [['framing.cr', '']],
	'bad-multiline-data' => [['framing.multiline-data', '']],
	'bad-empty-data' => [['framing.empty-data', 3], ['sdk.json', 3]],
	'bad-not-json' => [['sdk.json', 3]],
	# chunk shape
	'bad-unknown-type' => [['sdk.schema', 4], ['type.unknown', 4]],
	'bad-foreign-sdk-type' => [['type.unknown', 4]],
	'bad-unknown-data-type' => [['type.unknown', 4]],
	'bad-misspelt-key' => [['keys.unknown', 24], ['finish.reason', 24]],
	'bad-misspelt-transient' => [['keys.unknown', 3],
	    ['data.transient', 3]],
	'bad-missing-required-field' => [['sdk.schema', 6]],
	'bad-data-payload' => [['data.payload', 20]],
	'bad-start-no-message-id' => [['start.message-id', 2]],
	# grammar
	'bad-chunk-after-finish' => [['terminal.trailing', 25]],
	'bad-terminal-missing' => [['terminal.missing', '']],
	'bad-delta-before-start' => [['reasoning.delta-before-start', 5],
	    ['sdk.state', 5]],
	'bad-reasoning-reopen' => [['reasoning.reopen', 7],
	    ['reasoning.end-after-end', 8]],
	'bad-reasoning-open-at-finish-step' => [
	    ['reasoning.open-at-finish-step', 7], ['reasoning.unclosed', 12]],
	'bad-tool-unknown-id' => [['tool.end-before-start', 5],
	    ['sdk.state', 5]],
	'bad-text-end-missing' => [['text.unclosed', 23],
	    ['suffix.text-end', 22]],
	'bad-step-unclosed' => [['step.unclosed', 23]],
	'bad-step-nested' => [['step.nested', 5], ['step.nested', 13],
	    ['step.unclosed', 25]],
	'bad-finish-step-unbalanced' => [['step.unbalanced', 4]],
	'bad-two-starts' => [['start.duplicate', 3]],
	'bad-chunk-before-start' => [['start.missing', 1]],
	'bad-start-after-error' => [['error.next', 2], ['start.after-error', 2]],
	'bad-prelude-after-start' => [['prelude.after-start', 3]],
	'bad-prelude-not-transient' => [['data.transient', 0],
	    ['prelude.shape', 0]],
	'bad-finish-error-without-error' => [
	    ['finish.error-without-error', 4]],
	'bad-two-errors' => [['error.next', 3], ['error.duplicate', 3]],
	'bad-error-then-stop' => [['error.next', 3],
	    ['finish.stop-after-error', 3]],
	'bad-error-then-chunk' => [['error.next', 4]],
	'bad-usage-missing' => [['usage.missing', 23], ['suffix.usage', 19]],
	'bad-usage-twice' => [['usage.duplicate', 21]],
	'bad-text-before-last-step' => [['suffix.text-end', 23]],
	'bad-text-two-deltas' => [['suffix.text-start', 22]],
);

# Every fixture body is covered by one of the tables, and vice versa.
opendir(my $dh, $fix) or die "$fix: $!";
my @bodies = sort map { /\A(.*)\.sse\z/ ? $1 : () } readdir($dh);
closedir($dh);
is_deeply(\@bodies, [sort(keys(%valid), keys(%invalid))],
    'fixtures/*.sse and the test tables name the same bodies');
cmp_ok(scalar(keys(%invalid)), '>=', 12, 'at least 12 invalid bodies');

for my $name (sort(keys(%valid))) {
	my $v = $valid{$name};
	my $file = "$fix/$name.sse";
	my $r = check('--file', $file, '--expect', $v->{expect});
	is($r->{rc}, 0, "$name: valid (exit 0)") or diag($r->{err});
	is($r->{err}, '', "$name: nothing on stderr");
	is(($r->{out} =~ tr/\n//), 1, "$name: one summary line on stdout");
	ok($r->{json} && $r->{json}{ok}, "$name: summary says ok");
	for my $k (sort(keys(%{ $v->{summary} }))) {
		is_deeply($r->{json}{$k}, $v->{summary}{$k}, "$name: $k");
	}
	is_deeply($r->{json}{types}, $v->{types}, "$name: chunk types")
	    if $v->{types};

	# The same bytes fed to the SDK parser one byte at a time.
	my $s = check('--file', $file, '--slice', '1');
	is($s->{out}, $r->{out}, "$name: same summary with --slice 1");

	# --expect is enforced.
	my ($wrong) = grep { $_ ne $v->{expect} } qw(stop error abort);
	my $w = check('--file', $file, '--expect', $wrong);
	is($w->{rc}, 1, "$name: --expect $wrong fails");
	like($w->{err}, qr/^check-stream: stream \[expect\.terminal\] terminal kind is $v->{expect}, --expect $wrong$/m,
	    "$name: names expect.terminal");
}

for my $name (sort(keys(%invalid))) {
	my $want = $invalid{$name};
	my $r = check('--file', "$fix/$name.sse", '--json');
	is($r->{rc}, 1, "$name: rejected (exit 1)");
	my $j = $r->{json};
	ok($j && !$j->{ok}, "$name: --json summary with ok:false");
	my @got = map { [$_->{rule}, $_->{chunk} // ''] }
	    @{ $j->{violations} // [] };
	is_deeply([sort { "@$a" cmp "@$b" } @got],
	    [sort { "@$a" cmp "@$b" } @$want],
	    "$name: exactly the expected rules and chunks")
	    or diag($r->{err});
	my @lines = split(/\n/, $r->{err});
	is(scalar(@lines), scalar(@$want), "$name: one stderr line per violation");
	for my $w (@$want) {
		my ($rule, $idx) = @$w;
		my $where = $idx eq '' ? qr/stream/ : qr/chunk #\Q$idx\E(?: \([^)]+\))?/;
		ok((grep { /^check-stream: $where \[\Q$rule\E\] \S/ } @lines),
		    "$name: stderr names [$rule]" .
		    ($idx eq '' ? '' : " at chunk #$idx"));
	}
	# Without --json nothing goes to stdout on failure.
	my $q = check('--file', "$fix/$name.sse");
	is_deeply([$q->{rc}, $q->{out}], [1, ''],
	    "$name: exit 1, stdout empty without --json");
}

# ---------------------------------------------------------------- heads

my $ok_body = "$fix/valid-success.sse";
my %heads = (
	'head-ok' => [],
	'head-continue-ok' => [],
	'head-no-ui-header' => ['header.ui-message-stream'],
	'head-json' => ['header.content-type'],
	'head-404' => ['http.status', 'http.body'],
);
for my $h (sort(keys(%heads))) {
	my $r = check('--file', $ok_body, '--headers', "$fix/$h.txt", '--json');
	my $want = $heads{$h};
	is($r->{rc}, @$want ? 1 : 0, "$h: exit status");
	is_deeply([map { $_->{rule} } @{ $r->{json}{violations} // [] }],
	    $want, "$h: violations");
	like($r->{err}, qr/^check-stream: response head \[\Q$_\E\]/m,
	    "$h: stderr names [$_]") for @$want;
}

# ---------------------------------------------------------------- usage

{
	my $r = check('--file', "$fix/valid-success.sse", '--expect', 'done');
	is($r->{rc}, 2, 'bad --expect value: usage error (exit 2)');
	$r = check('--headers', "$fix/head-ok.txt");
	is($r->{rc}, 2, 'neither --file nor --url: usage error (exit 2)');
	$r = check('--file', "$dir/does-not-exist");
	is($r->{rc}, 2, 'unreadable --file: exit 2');
}

# ---------------------------------------------------------------- --url
#
# A one-connection-at-a-time HTTP server in a child: answers the N-th
# request with the N-th canned response and records the request.

sub head_text {
	my ($status, @h) = @_;
	return join("\r\n", "HTTP/1.1 $status", @h, 'Connection: close', '',
	    '');
}
my @answers = (
	head_text('200 OK', 'Content-Type: text/event-stream',
	    'Cache-Control: no-cache', 'X-Vercel-AI-UI-Message-Stream: v1') .
	    slurp("$fix/valid-success.sse"),
	head_text('200 OK', 'Content-Type: text/event-stream') .
	    slurp("$fix/valid-success.sse"),
	head_text('200 OK', 'Content-Type: text/event-stream',
	    'X-Vercel-AI-UI-Message-Stream: v1') .
	    slurp("$fix/bad-two-starts.sse"),
	head_text('404 Not Found', 'Content-Type: application/json') .
	    '{"code":"not_found","message":"Session not found"}',
);
my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
    Listen => 8, Proto => 'tcp', ReuseAddr => 1) or die "listen: $!";
my $port = $srv->sockport;
my $spid = fork() // die "fork: $!";
if ($spid == 0) {
	my $n = 0;
	while (my $c = $srv->accept) {
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			last unless sysread($c, $req, 4096, length($req));
		}
		my ($len) = $req =~ /^content-length:\s*(\d+)/mi;
		my $have = length($req) - index($req, "\r\n\r\n") - 4;
		while (defined($len) && $have < $len) {
			my $got = sysread($c, $req, 4096, length($req)) or last;
			$have += $got;
		}
		if (open(my $fh, '>:raw', "$dir/req$n")) {
			print $fh $req;
			close($fh);
		}
		my $ans = $answers[$n++] // head_text('500 Oops');
		syswrite($c, $ans);
		close($c);
	}
	POSIX::_exit(0);
}
close($srv);
END { kill('KILL', $spid) if $spid }

my $url = "http://127.0.0.1:$port/api/sessions/s-1/turns";
{
	my $saved = "$dir/saved.sse";
	my $r = check('--url', $url, '--body', '{"text":"what is 6*7?"}',
	    '--header', 'Idempotency-Key: key-123', '--expect', 'stop',
	    '--save', $saved, '--save-headers', "$dir/saved.head");
	is($r->{rc}, 0, '--url: a good answer passes') or diag($r->{err});
	is($r->{json} && $r->{json}{text}, "The answer is 42. \x{2713}",
	    '--url: summary has the final text');
	is(slurp($saved), slurp("$fix/valid-success.sse"),
	    '--url: --save keeps the exact body bytes');
	like(slurp("$dir/saved.head"),
	    qr/^x-vercel-ai-ui-message-stream: v1\r$/m,
	    '--url: --save-headers keeps the head');
	my $req = slurp("$dir/req0");
	like($req, qr{\APOST /api/sessions/s-1/turns HTTP/1\.1\r\n},
	    '--url: POSTs to the path');
	like($req, qr/^content-type: application\/json\r$/mi,
	    '--url: sends content-type application/json');
	like($req, qr/^idempotency-key: key-123\r$/mi,
	    '--url: sends the --header');
	like($req, qr/\r\n\r\n\{"text":"what is 6\*7\?"\}\z/,
	    '--url: sends the --body');

	$r = check('--url', $url);
	is($r->{rc}, 1, '--url: missing ui-message-stream header fails');
	like($r->{err}, qr/^check-stream: response head \[header\.ui-message-stream\]/m,
	    '--url: names [header.ui-message-stream]');
	like(slurp("$dir/req1"), qr/\r\n\r\n\{"text":"hi"\}\z/,
	    '--url: default body');

	$r = check('--url', $url, '--json');
	is_deeply([map { $_->{rule} } @{ $r->{json}{violations} // [] }],
	    ['start.duplicate'], '--url: body violations are reported');

	$r = check('--url', $url);
	is($r->{rc}, 1, '--url: 404 fails');
	like($r->{err}, qr/^check-stream: response head \[http\.status\] status 404, want 200$/m,
	    '--url: names [http.status]');
	like($r->{err}, qr/Session not found/, '--url: shows the error body');
}

kill('KILL', $spid);
waitpid($spid, 0);
$spid = 0;

done_testing();
