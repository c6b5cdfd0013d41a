#!/usr/bin/perl
#
# fleet-lmstub: the scripted OpenAI-compatible server used by tests.
# Run from the repository root: prove t/50-lmstub.t

use strict;
use warnings;
use utf8;

use Cwd ();
use File::Temp qw(tempdir);
use FindBin;
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

my $root = Cwd::abs_path("$FindBin::Bin/..");
my $bin = "$root/bin/fleet-lmstub";
plan skip_all => "bin/fleet-lmstub not built (see lmstub/lmstub.c)"
    unless -x $bin;

binmode(Test::More->builder->$_, ':encoding(UTF-8)')
    for qw(output failure_output todo_output);

my $dir = tempdir('lmstub-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $json = JSON::PP->new->utf8->canonical;
my $http = HTTP::Tiny->new(timeout => 10, keep_alive => 1);
my $nfile = 0;

sub write_file {
	my ($text) = @_;
	my $path = sprintf('%s/f%d', $dir, ++$nfile);
	open(my $fh, '>:raw', $path) or die "$path: $!";
	print $fh $text;
	close($fh) or die "$path: $!";
	return $path;
}

sub slurp {
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or return '';
	local $/;
	return scalar <$fh>;
}

# Fork and exec, stdout on a pipe, stderr into a file.
sub spawn {
	my (@cmd) = @_;
	my $errfile = sprintf('%s/err%d', $dir, ++$nfile);
	pipe(my $r, my $w) or die "pipe: $!";
	my $pid = fork() // die "fork: $!";
	if ($pid == 0) {
		close($r);
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>&', $w) or POSIX::_exit(126);
		open(STDERR, '>', $errfile) or POSIX::_exit(126);
		exec(@cmd) or POSIX::_exit(127);
	}
	close($w);
	return { pid => $pid, out => $r, errfile => $errfile };
}

# One line from a pipe or socket within $secs, or undef.
my %pending;
sub read_line {
	my ($fh, $secs) = @_;
	my ($sel, $deadline) = (IO::Select->new($fh), time + $secs);
	my $buf = \$pending{$fh};
	$$buf //= '';
	while ($$buf !~ /\n/) {
		my $left = $deadline - time;
		last if $left <= 0 || !$sel->can_read($left);
		last unless sysread($fh, $$buf, 4096, length($$buf));
	}
	return $$buf =~ s/\A(.*)\n// ? $1 : undef;
}

# Exit status of a child, or undef if it is still running after $secs.
sub reap {
	my ($pid, $secs) = @_;
	my $st;
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm($secs);
		waitpid($pid, 0);
		$st = $?;
		alarm(0);
	};
	alarm(0);
	return $st;
}

# Stubs still running when the test ends, even by dying, are killed.
my %running;
END {
	kill('KILL', $_) for keys(%running);
}

sub start_stub {
	my ($script, @args) = @_;
	my $file = write_file($script);
	my $log = "$dir/log$nfile.jsonl";
	my $p = spawn($bin, '--listen', '127.0.0.1:0', '--script', $file,
	    '--log', $log, @args);
	my $line = read_line($p->{out}, 10) // '';
	like($line, qr/\Alistening 127\.0\.0\.1:\d+\z/,
	    'stub prints its listening line') or
	    diag(slurp($p->{errfile}));
	($p->{port}) = $line =~ /:(\d+)\z/;
	$running{$p->{pid}} = 1;
	$p->{log} = $log;
	$p->{url} = "http://127.0.0.1:" . ($p->{port} // 1);
	return $p;
}

sub stop_stub {
	my ($p, $name) = @_;
	kill('TERM', $p->{pid});
	my $st = reap($p->{pid}, 10);
	delete($running{$p->{pid}});
	if (!defined($st)) {
		kill('KILL', $p->{pid});
		reap($p->{pid}, 10);
	}
	is($st, 0, "$name: exits 0 on SIGTERM");
	is(slurp($p->{errfile}), '', "$name: nothing on stderr");
}

sub post {
	my ($p, $body, $path) = @_;
	my $raw = '';
	my $res = $http->request('POST', $p->{url} .
	    ($path // '/v1/chat/completions'), {
		headers => { 'content-type' => 'application/json' },
		content => ref($body) ? $json->encode($body) : $body,
		data_callback => sub { $raw .= $_[0] },
	});
	# HTTP::Tiny calls data_callback for 2xx answers only; 599 is its own.
	$res->{raw} = $res->{status} =~ /\A(2..|599)\z/ ? $raw :
	    $res->{content};
	return $res;
}

sub chat {
	my ($text, %opt) = @_;
	return {
		model => $opt{model} // 'test-model',
		messages => [
			{ role => 'system', content => 'Be brief.' },
			{ role => 'user', content => $text },
		],
		%{ $opt{extra} // {} },
	};
}

# The chunk objects of an SSE body; dies unless the framing is exact.
sub events {
	my ($raw) = @_;
	die "bad SSE framing\n" unless $raw =~ /\A(?:data: [^\n]+\n\n)*\z/;
	my @ev = $raw =~ /^data: ([^\n]+)$/mg;
	pop(@ev) if @ev && $ev[-1] eq '[DONE]';
	return map { $json->decode($_) } @ev;
}

sub error_ok {
	my ($res, $status, $re, $name) = @_;
	is($res->{status}, $status, "$name: status $status");
	my $b = eval { $json->decode($res->{raw}) } // {};
	my $e = $b->{error} // {};
	like($e->{message} // '', $re, "$name: error message");
	ok(exists($e->{type}) && exists($e->{param}) && exists($e->{code}) &&
	    !defined($e->{param}) && keys(%$e) == 4,
	    "$name: OpenAI error shape") or diag($res->{raw});
	return $e;
}

sub tokens {
	my ($s) = @_;
	return int((length($s) + 3) / 4);
}

my $streamed = 'Hello from the stub: ünïcødé ✓ and 🚀, streamed in pieces.';
my @script = (
	'# comment lines and blank lines are ignored',
	'',
	{ match => 'stream me', content => $streamed, chunk_chars => 5,
	    repeat => JSON::PP::true },
	{ match => 'plain me', content => 'A plain answer.' },
	{ match => 'order', content => 'first' },
	{ match => 'order', content => 'second' },
	{ match => 'again', content => 'forever', repeat => JSON::PP::true },
	{ model => 'special', content => 'for the special model' },
	{ match => 'from parts', content => 'parts matched' },
	{ match => 'limit me', status => 429, retry_after => 2,
	    content => 'Slow down, scripted.' },
	{ match => 'cut me', content => '0123456789abcdef', chunk_chars => 4,
	    cut_after_chars => 6 },
	{ match => 'late', content => 'late answer', delay_ms => 300 },
	{ match => 'busy', content => 'x' x 40, chunk_chars => 4,
	    delay_ms => 200, interval_ms => 10, repeat => JSON::PP::true },
	{ match => 'slow drip', content => 'y' x 400, chunk_chars => 1,
	    interval_ms => 20, repeat => JSON::PP::true },
);
my $script = join('', map { (ref($_) ? $json->encode($_) : $_) . "\n" }
    @script);
my %line;
for my $i (0 .. $#script) {
	$line{$script[$i]{match} // $script[$i]{model}} = $i + 1
	    if ref($script[$i]);
}

my $stub = start_stub($script);
my @sent;	# [request body, status seen] for the --log check

sub logged_post {
	my ($body, $path) = @_;
	my $res = post($stub, $body, $path);
	push(@sent, [$body, $res->{status}, $path]);
	return $res;
}

# Streaming with include_usage.
{
	my $req = chat('please stream me', extra => { stream => JSON::PP::true,
	    stream_options => { include_usage => JSON::PP::true } });
	my $res = logged_post($req);
	is($res->{status}, 200, 'stream: status 200');
	like($res->{headers}{'content-type'}, qr{\Atext/event-stream},
	    'stream: text/event-stream');
	like($res->{raw}, qr/\ndata: \[DONE\]\n\n\z/, 'stream: ends with [DONE]');
	my @ev = eval { events($res->{raw}) };
	is($@, '', 'stream: exact SSE framing') or diag($res->{raw});
	my @content = grep { @{ $_->{choices} // [] } &&
	    defined($_->{choices}[0]{delta}{content}) } @ev;
	is(join('', map { $_->{choices}[0]{delta}{content} } @content),
	    $streamed, 'stream: reassembled content equals the script');
	my @sizes = map { length($_->{choices}[0]{delta}{content}) }
	    @content[1 .. $#content];
	my $last = pop(@sizes);
	ok(@sizes > 2 && !grep({ $_ != 5 } @sizes) && $last >= 1 && $last <= 5,
	    'stream: deltas have chunk_chars characters, the last at most')
	    or diag("sizes @sizes $last");
	is_deeply($ev[0]{choices}[0]{delta},
	    { role => 'assistant', content => '', refusal => undef },
	    'stream: role on the first chunk');
	ok(!grep({ $_->{object} ne 'chat.completion.chunk' ||
	    $_->{id} ne $ev[0]{id} || $_->{model} ne 'test-model' ||
	    $_->{created} !~ /\A\d+\z/ } @ev),
	    'stream: object, id, model and created on every chunk');
	like($ev[0]{id}, qr/\Achatcmpl-/, 'stream: chatcmpl- id');
	my @fin = grep { @{ $_->{choices} // [] } &&
	    defined($_->{choices}[0]{finish_reason}) } @ev;
	ok(@fin == 1 && $fin[0] == $ev[-2] &&
	    $fin[0]{choices}[0]{finish_reason} eq 'stop' &&
	    !%{ $fin[0]{choices}[0]{delta} },
	    'stream: one finish_reason "stop" with an empty delta, then usage');
	my $u = $ev[-1]{usage} // {};
	ok(@ev && !@{ $ev[-1]{choices} // [1] },
	    'stream: usage chunk has empty choices');
	is($u->{completion_tokens}, tokens($streamed),
	    'stream: completion tokens are characters/4');
	is($u->{prompt_tokens}, tokens('Be brief.please stream me'),
	    'stream: prompt tokens are characters/4');
	is($u->{total_tokens}, $u->{prompt_tokens} + $u->{completion_tokens},
	    'stream: total = prompt + completion');
	ok(!grep({ !exists($_->{usage}) || defined($_->{usage}) }
	    @ev[0 .. $#ev - 1]), 'stream: usage null on the other chunks');
}

# Streaming without include_usage.
{
	my $res = logged_post(chat('stream me again',
	    extra => { stream => JSON::PP::true }));
	my @ev = eval { events($res->{raw}) };
	ok(@ev > 2 && !grep({ exists($_->{usage}) } @ev),
	    'stream: no usage without include_usage');
	is($ev[-1]{choices}[0]{finish_reason}, 'stop',
	    'stream: last chunk finishes without include_usage');
}

# Non-streaming.
{
	my $res = logged_post(chat('plain me'));
	is($res->{status}, 200, 'plain: status 200');
	like($res->{headers}{'content-type'}, qr{\Aapplication/json},
	    'plain: application/json');
	like($res->{headers}{'x-request-id'} // '', qr/\Areq_/,
	    'plain: x-request-id');
	my $b = eval { $json->decode($res->{raw}) } // {};
	is($b->{object}, 'chat.completion', 'plain: chat.completion');
	is($b->{choices}[0]{message}{content}, 'A plain answer.',
	    'plain: scripted content');
	is($b->{choices}[0]{message}{role}, 'assistant', 'plain: role');
	is($b->{choices}[0]{finish_reason}, 'stop', 'plain: finish_reason');
	is($b->{usage}{total_tokens},
	    tokens('Be brief.plain me') + tokens('A plain answer.'),
	    'plain: usage total');
}

sub answer {
	my ($res) = @_;
	my $b = eval { $json->decode($res->{raw}) } // {};
	return $b->{choices}[0]{message}{content} // "HTTP $res->{status}";
}

# Selection: consumption order, repeat, model, content parts.
is(answer(logged_post(chat('order one'))), 'first', 'order: first entry');
is(answer(logged_post(chat('order two'))), 'second', 'order: then the next');
my $nomatch = logged_post(chat("order three \x{263a} " . 'z' x 100));
error_ok($nomatch, 500, qr/no script entry matched.*order three \x{263a} z+\.\.\./,
    'order: consumed entries are gone, no match');
is(answer(logged_post(chat('again'))), 'forever', 'repeat: first time');
is(answer(logged_post(chat('again'))), 'forever', 'repeat: second time');
is(answer(logged_post(chat('hi', model => 'special'))),
    'for the special model', 'model: selects the entry');
error_ok(logged_post(chat('hi', model => 'other')), 500,
    qr/no script entry matched \(model "other"/, 'model: others do not match');
is(answer(logged_post({ model => 'm', messages => [
    { role => 'user', content => 'from parts? no' },
    { role => 'user', content => [
	{ type => 'text', text => 'text from ' },
	{ type => 'image_url', image_url => { url => 'data:,' } },
	{ type => 'text', text => 'parts' } ] } ] })),
    'parts matched', 'match: text parts are concatenated');

# A scripted 429.
{
	my $res = logged_post(chat('limit me'));
	my $e = error_ok($res, 429, qr/\ASlow down, scripted\.\z/, '429');
	is($res->{headers}{'retry-after'}, '2', '429: Retry-After');
	is($res->{headers}{'retry-after-ms'}, '2000', '429: retry-after-ms');
	is($e->{code}, 'rate_limit_exceeded', '429: code');
}

# cut_after_chars drops the connection mid-stream.
{
	my $res = logged_post(chat('cut me', extra => { stream => JSON::PP::true }));
	$sent[-1][1] = 200;
	is($res->{status}, 599, 'cut: the client sees a broken response');
	my @ev = eval { events($res->{raw}) };
	is(join('', map { $_->{choices}[0]{delta}{content} // '' } @ev),
	    '012345', 'cut: exactly cut_after_chars characters');
	unlike($res->{raw}, qr/DONE|finish_reason":"stop/,
	    'cut: no finish and no [DONE]');
}

# delay_ms delays the answer without blocking other requests.
{
	my $t0 = time;
	is(answer(logged_post(chat('late'))), 'late answer', 'delay: answer');
	cmp_ok(time - $t0, '>=', 0.29, 'delay: took delay_ms');
}

# Bad requests and unknown paths.
error_ok(logged_post('{"model": "m", "messages": ['), 400,
    qr/could not parse/, 'bad JSON');
error_ok(logged_post({ messages => [{ role => 'user', content => 'hi' }] }),
    400, qr/model/, 'missing model');
error_ok(logged_post({ model => 'm', messages => [] }), 400, qr/messages/,
    'empty messages');
error_ok(logged_post({ model => 'm', messages => [{ content => 'hi' }] }),
    400, qr/role/, 'message without role');
error_ok(logged_post({ model => 'm', messages => [{ role => 'user',
    content => 7 }] }), 400, qr/content/, 'message with numeric content');
error_ok(logged_post(chat('plain'), '/v1/completions'), 404,
    qr/Unknown request URL/, 'unknown path');
is(answer(logged_post(chat('again'), '/foo/bar/chat/completions')),
    'forever', 'any path prefix works');
{
	# libevent reads and drops an oversized body, then answers 413.
	local $SIG{PIPE} = 'IGNORE';
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
	    PeerPort => $stub->{port}, Timeout => 10) or die "connect: $!";
	my $size = 64 * 1024 * 1024 + 1;
	syswrite($s, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" .
	    "Content-Type: application/json\r\nContent-Length: $size\r\n\r\n");
	my $mib = ' ' x (1024 * 1024);
	for (my $left = $size; $left > 0; $left -= length($mib)) {
		last unless defined(syswrite($s, $mib, $left < length($mib) ?
		    $left : length($mib)));
	}
	like(read_line($s, 10) // '', qr{\AHTTP/1\.1 413 },
	    'a body over 64 MiB gets 413');
	close($s);
}
{
	my $res = $http->get("$stub->{url}/v1/models");
	push(@sent, [undef, $res->{status}, '/v1/models', 'GET']);
	my $b = eval { $json->decode($res->{content}) } // {};
	is_deeply([map { $_->{id} } @{ $b->{data} // [] }], ['special'],
	    'models: the models named in the script');
}

# Concurrency: 20 delayed streams at once, and a client that goes away.
{
	my $body = $json->encode(chat('busy', extra => { stream => JSON::PP::true }));
	my $raw = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" .
	    "Content-Type: application/json\r\nConnection: close\r\n" .
	    "Content-Length: " . length($body) . "\r\n\r\n$body";
	my $drip = $json->encode(chat('slow drip', extra => { stream => JSON::PP::true }));
	my $quit = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
	    PeerPort => $stub->{port}, Timeout => 10) or die "connect: $!";
	syswrite($quit, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" .
	    "Content-Type: application/json\r\nContent-Length: " .
	    length($drip) . "\r\n\r\n$drip");
	push(@sent, [$json->decode($drip), 200]);
	my $first = read_line($quit, 10) // '';
	like($first, qr{\AHTTP/1\.1 200}, 'disconnect: stream started');
	close($quit);

	my (%buf, @socks);
	my $t0 = time;
	for (1 .. 20) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
		    PeerPort => $stub->{port}, Timeout => 10) or die "connect: $!";
		syswrite($s, $raw);
		push(@socks, $s);
		$buf{$s} = '';
		push(@sent, [$json->decode($body), 200]);
	}
	my $sel = IO::Select->new(@socks);
	while ($sel->count && time - $t0 < 15) {
		for my $s ($sel->can_read(1)) {
			$sel->remove($s) unless sysread($s, $buf{$s}, 65536,
			    length($buf{$s}));
		}
	}
	my $elapsed = time - $t0;
	my $done = grep {
	    m{\AHTTP/1\.1 200 .*data: \[DONE\]\n\n\r\n0\r\n\r\n\z}s }
	    values(%buf);
	is($done, 20, 'concurrency: 20 streams complete');
	cmp_ok($elapsed, '<', 3, 'concurrency: delays overlap (20 x 0.2 s)');
	is(answer(post($stub, chat('again'))), 'forever',
	    'disconnect: the stub still answers');
	push(@sent, [chat('again'), 200]);
}

# The --log file: one line per request, bodies as sent.
{
	my @lines = split(/\n/, slurp($stub->{log}));
	is(scalar(@lines), scalar(@sent), 'log: one line per request');
	my @got = map { eval { $json->decode($_) } } @lines;
	is(scalar(@got), scalar(@lines), 'log: every line is JSON');
	my $ok = 1;
	for my $i (0 .. $#sent) {
		my ($body, $status, $path, $method) = @{ $sent[$i] };
		my $want = ref($body) ? $body : undef;
		$want = eval { $json->decode($body) } if !ref($body);
		my $g = $got[$i] // {};
		if (($g->{status} // 0) != $status ||
		    ($g->{path} // '') ne ($path // '/v1/chat/completions') ||
		    ($g->{method} // '') ne ($method // 'POST') ||
		    $json->encode([$g->{body}]) ne $json->encode([$want])) {
			diag("log line $i: $lines[$i]");
			$ok = 0;
		}
	}
	ok($ok, 'log: method, path, status and body of every request');
	is($got[0]{entry}, $line{'stream me'}, 'log: entry is the script line');
	is($got[2]{entry}, $line{'plain me'}, 'log: entry of the plain request');
	ok(exists($got[5]{entry}) && !defined($got[5]{entry}),
	    'log: entry is null without a match');
}

# The exact body bytes reach the log, on one line.
{
	my $raw = qq({\n  "model": "m",\n  "temperature": 0.7,\n) .
	    qq(  "messages": [{"role": "user", "content": "again"}]\n}\n);
	is(answer(post($stub, $raw)), 'forever', 'log: pretty-printed request');
	my @lines = split(/\n/, slurp($stub->{log}));
	like($lines[-1], qr/"body":\{  "model": "m",  "temperature": 0\.7,/,
	    'log: body as received, without newlines');
}

stop_stub($stub, 'stub');

# Script errors stop the stub at startup with file:line, exit status 2.
for my $case (
    ['{"content": "ok"}' . "\n\n" . '{"content": "x", "colour": "red"}',
	3, qr/unknown key "colour"/],
    ['# c' . "\n" . '{"content": "x", "chunk_chars": "16"}', 2,
	qr/chunk_chars/],
    ['{"content": "x", "chunk_chars": 0}', 1, qr/chunk_chars/],
    ['{"content": "x", "repeat": 1}', 1, qr/repeat/],
    ['{"content": "x"', 1, qr/./],
    ['["content"]', 1, qr/not a JSON object/],
    ['{"match": "x"}', 1, qr/"content" is required/],
    ['{"content": "x", "status": 302}', 1, qr/status/],
) {
	my ($text, $lineno, $re) = @$case;
	my $file = write_file("$text\n");
	my $p = spawn($bin, '--listen', '127.0.0.1:0', '--script', $file);
	my $out = read_line($p->{out}, 10);
	my $st = reap($p->{pid}, 10);
	my $err = slurp($p->{errfile});
	is($st, 2 << 8, "bad script line $lineno ($re): exit status 2");
	like($err, qr/\Q$file\E:$lineno: /, "bad script: names $file:$lineno");
	like($err, $re, 'bad script: says what is wrong');
	ok(!defined($out), 'bad script: never listens');
}

# Usage errors.
{
	my $ok = write_file('{"content": "x"}' . "\n");
	for my $args (['--listen', '0.0.0.0:0', '--script', $ok],
	    ['--listen', '127.0.0.1', '--script', $ok], ['--script', $ok]) {
		my $p = spawn($bin, @$args);
		is(reap($p->{pid}, 10), 2 << 8, "usage error (@$args): exit 2");
	}
	my $p = spawn($bin, '--help');
	my $help = '';
	while (defined(my $l = read_line($p->{out}, 10))) {
		$help .= "$l\n";
	}
	is(reap($p->{pid}, 10), 0, '--help exits 0');
	my @missing = grep { index($help, $_) < 0 } qw(content match model
	    status retry_after delay_ms chunk_chars cut_after_chars repeat
	    --log --listen --script --allow-non-loopback);
	is("@missing", '', '--help documents options and script keys');
}

# The official openai client (t/js), when it has been installed.
SKIP: {
	my $js = "$root/t/js";
	skip("t/js/node_modules/openai missing (run npm ci in t/js)", 1)
	    unless -d "$js/node_modules/openai";
	skip('node not found', 1)
	    unless grep { -x "$_/node" } split(/:/, $ENV{PATH} // '');
	my $p = spawn('node', "$js/openai-lmstub.mjs", $bin);
	my ($n, $plan) = (0, undef);
	while (defined(my $l = read_line($p->{out}, 60))) {
		if ($l =~ /\A(not )?ok \d+ - (.*)\z/) {
			ok(!$1, "openai client: $2");
			$n++;
		} elsif ($l =~ /\A1\.\.(\d+)\z/) {
			$plan = $1;
		} else {
			diag($l);
		}
	}
	my $st = reap($p->{pid}, 60);
	diag(slurp($p->{errfile})) if $st;
	is($st, 0, 'openai client: script exits 0');
	ok($n > 0 && defined($plan) && $plan == $n,
	    'openai client: ran its whole plan');
}

done_testing();
