#!/usr/bin/perl
# The /api/ routes that answer at once: routing, ids, x-request-id;
# Sessions (create, read, list, patch); Turn history mapping; attachment
# upload and read (bytes and digests checked in the database); the upload
# bound; Run cancellation; 503 on database errors.
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::Bin/lib";
use Digest::SHA qw(sha256_hex);
use HTTP::Tiny;
use JSON::PP;
use Fleet;
use Test::More;

my $J = JSON::PP->new->utf8->canonical;
my $WS = '7793d159-223b-5feb-a99c-f7696debb478';
my $OTHER_WS = '0badc0de-0000-4000-8000-000000000001';
my $UUID_RE = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
my $TS_RE = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/;
my $NOBODY = 'deadbeef-0000-4000-8000-00000000ffff';

my $f = Fleet->new(workers => 1);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'fleetd started') or BAIL_OUT($err);
my $ua = HTTP::Tiny->new(timeout => 60);

# (response, decoded body) of one request.  json => a structure or text
# (sent as application/json unless a content-type header says otherwise).
sub call {
	my ($m, $path, %o) = @_;
	my %h = %{ $o{headers} // {} };
	my %args = (headers => \%h);
	if (exists $o{json}) {
		$args{content} = ref $o{json} ? $J->encode($o{json}) : $o{json};
		$h{'content-type'} //= 'application/json';
	}
	$args{content} = $o{content} if exists $o{content};
	my $r = $ua->request($m, "$f->{url}$path", \%args);
	my $b = eval { $J->decode($r->{content}) };
	return ($r, $b);
}

sub err_is {
	my ($r, $b, $status, $code, $name, $msg) = @_;
	is($r->{status}, $status, "$name: $status");
	is(ref $b eq 'HASH' ? $b->{code} : $r->{content}, $code,
	    "$name: code $code");
	is($b->{message}, $msg, "$name: message") if defined $msg;
}

sub sql {
	my ($q) = @_;
	my ($rc, $out, $err) = $f->psql($q);
	is($rc, 0, "psql: " . substr($q, 0, 60)) or diag($err);
	chomp $out;
	return $out;
}

sub canon { $J->encode($_[0]) }

my ($r, $b);

# --- Routing, ids, request ids ------------------------------------------

($r, $b) = call('GET', '/api/nothing/here');
err_is($r, $b, 404, 'not_found', 'unknown /api/ path', 'Not found');
like($r->{headers}{'content-type'}, qr{^application/json}, 'JSON error');
like($r->{headers}{'x-request-id'} // '', $UUID_RE,
    'x-request-id on a 404');
my $rid1 = $r->{headers}{'x-request-id'} // '';
($r, $b) = call('GET', '/api/nothing/here');
isnt($r->{headers}{'x-request-id'}, $rid1, 'a fresh one per request');
($r, $b) = call('GET', "/api/sessions/$NOBODY",
    headers => { 'x-request-id' => 'client-req.42:a_b' });
is($r->{headers}{'x-request-id'}, 'client-req.42:a_b',
    "the client's own id is echoed");
($r, $b) = call('GET', "/api/sessions/$NOBODY",
    headers => { 'x-request-id' => 'bad id<script>' });
like($r->{headers}{'x-request-id'} // '', $UUID_RE,
    'an unsafe one is replaced');
($r, $b) = call('GET', "/api/sessions/$NOBODY",
    headers => { 'x-request-id' => 'x' x 129 });
like($r->{headers}{'x-request-id'} // '', $UUID_RE,
    'an overlong one is replaced');
($r, $b) = call('GET', '/api/sessions/');
err_is($r, $b, 404, 'not_found', 'trailing slash');
($r, $b) = call('GET', "/api/runs/$NOBODY");
err_is($r, $b, 404, 'not_found', 'no GET /api/runs/{id}');
($r, $b) = call('GET', "/api/sessions/$NOBODY/turns/x");
err_is($r, $b, 404, 'not_found', 'path too deep');
($r, $b) = call('GET', '/api');
err_is($r, $b, 404, 'not_found', '/api without slash is not an API path');

for my $t (['DELETE', '/api/sessions'], ['PUT', "/api/sessions/$NOBODY"],
    ['DELETE', "/api/sessions/$NOBODY"], ['GET', '/api/attachments'],
    ['DELETE', "/api/attachments/$NOBODY"],
    ['GET', "/api/runs/$NOBODY/cancellation"],
    ['POST', "/api/runs/$NOBODY/cancellation"],
    ['PUT', "/api/sessions/$NOBODY/turns"],
    ['PUT', '/api/sessions/not-a-uuid']) {
	($r, $b) = call(@$t);
	err_is($r, $b, 405, 'http_405', "$t->[0] $t->[1]",
	    'Method not allowed');
	like($r->{headers}{'x-request-id'} // '', $UUID_RE,
	    "x-request-id on a 405");
}

for my $t (['GET', '/api/sessions/not-a-uuid'],
    ['GET', '/api/sessions/7793d159223b5feba99cf7696debb478'],
    ['GET', '/api/sessions/7793d159-223b-5feb-a99c-f7696debb47'],
    ['GET', '/api/sessions/7793d159-223b-5feb-a99c-f7696debb478a'],
    ['GET', '/api/sessions/7793d159-223b-5feb-a99c-f7696debb47z'],
    ['PATCH', '/api/sessions/123'], ['GET', '/api/sessions/123/turns'],
    ['POST', '/api/sessions/123/turns'], ['GET', '/api/attachments/xyz'],
    ['PUT', '/api/runs/123/cancellation']) {
	($r, $b) = call(@$t);
	err_is($r, $b, 422, 'validation_error', "malformed id: $t->[0] $t->[1]",
	    'Request validation failed.');
}

# The Turn stream is not ours: a valid id reaches it (whatever it answers,
# it is neither a routing error nor an id error).
($r, $b) = call('POST', "/api/sessions/$NOBODY/turns",
    json => { text => 'hi' }, headers => { 'idempotency-key' => 'k-1' });
ok($r->{status} != 404 && $r->{status} != 405 && $r->{status} != 422,
    'POST .../turns with a valid id is handed to the Turn stream')
    or diag("$r->{status} $r->{content}");

# --- Sessions: create and read -------------------------------------------

($r, $b) = call('POST', '/api/sessions', json => {});
is($r->{status}, 201, 'create with {}: 201');
like($b->{id} // '', $UUID_RE, 'an id');
is($b->{title}, 'New Session', 'default title');
is($b->{status}, 'active', 'active');
ok(defined $b->{checkpoint_version} && $b->{checkpoint_version} eq '0' &&
    $r->{content} =~ /"checkpoint_version":0[,}]/, 'checkpoint_version 0');
like($b->{created_at} // '', $TS_RE, 'created_at ISO-8601 with offset');
like($b->{updated_at} // '', $TS_RE, 'updated_at too');
is($b->{created_at}, $b->{updated_at}, 'equal on create');
is(join(',', sort keys %$b),
    'checkpoint_version,created_at,id,status,title,updated_at',
    'exactly the SessionDetailResponse fields');
like($r->{headers}{'x-request-id'} // '', $UUID_RE, 'x-request-id on 201');
my $s1 = $b;
is(sql("SELECT title || '|' || status || '|' || workspace_id "
    . "FROM fleet_sessions WHERE id = '$s1->{id}'"),
    "New Session|active|$WS", 'row in the database, in the workspace');

($r, $b) = call('GET', "/api/sessions/$s1->{id}");
is($r->{status}, 200, 'get: 200');
is(canon($b), canon($s1), 'same document as created');
($r, $b) = call('GET', '/api/sessions/' . uc $s1->{id});
is($r->{status}, 200, 'upper-case id: 200');
is($b->{id}, $s1->{id}, 'id answered in lower case');
($r, $b) = call('GET', "/api/sessions/$NOBODY");
err_is($r, $b, 404, 'session_not_found', 'unknown session',
    'Session not found');

($r, $b) = call('POST', '/api/sessions');
is($r->{status}, 201, 'create with an empty body: 201');
is($b->{title}, 'New Session', 'default title');
isnt($b->{id}, $s1->{id}, 'a new id');

my %titles = (
	'null' => [undef, 'New Session'],
	'blank' => [" \t\n ", 'New Session'],
	'padded' => ['  Hello  ', 'Hello'],
	'unicode' => ['Grüße 🚀', 'Grüße 🚀'],
	'255' => ['t' x 255, 't' x 255],
	'256' => ['u' x 256, 'u' x 255],
	'multibyte cut' => [('a' x 254) . 'éé', ('a' x 254) . 'é'],
	'long multibyte' => ['€' x 300, '€' x 255],
);
for my $k (sort keys %titles) {
	my ($in, $want) = @{ $titles{$k} };
	($r, $b) = call('POST', '/api/sessions', json => { title => $in });
	is($r->{status}, 201, "title $k: 201");
	is($b->{title}, $want, "title $k: stored as expected");
	if ($k eq 'long multibyte') {
		is(sql("SELECT length(title) || ',' || octet_length(title) "
		    . "FROM fleet_sessions WHERE id = '$b->{id}'"), '255,765',
		    'cut on a character boundary in the database');
	}
}
($r, $b) = call('POST', '/api/sessions',
    json => '{"title":"x","extra":1}');
is($r->{status}, 201, 'unknown keys are ignored (no additionalProperties '
    . 'rule on SessionCreateRequest)');

for my $t (['{"title":5}', 'number title'], ['{"title":["x"]}', 'array title'],
    ['{"title":true}', 'boolean title'], ['[]', 'array body'],
    ['"x"', 'string body'], ['{"title":', 'truncated JSON'],
    ['{"title":"a\u0000b"}', 'NUL in title'],
    ["{\"title\":\"\xff\"}", 'invalid UTF-8']) {
	($r, $b) = call('POST', '/api/sessions', json => $t->[0]);
	err_is($r, $b, 422, 'validation_error', "create: $t->[1]",
	    'Request validation failed.');
}
($r, $b) = call('POST', '/api/sessions', content => '{}',
    headers => { 'content-type' => 'text/plain' });
err_is($r, $b, 422, 'validation_error', 'create: text/plain body');
($r, $b) = call('POST', '/api/sessions', content => '{}',
    headers => { 'content-type' => 'application/vnd.fleet+json' });
is($r->{status}, 201, 'create: a +json content type is JSON');

# --- Sessions: patch -----------------------------------------------------

my $sp = (call('POST', '/api/sessions', json => { title => 'Patch me' }))[1];
sql("UPDATE fleet_sessions SET updated_at = now() - interval '1 hour', "
    . "created_at = now() - interval '1 hour' WHERE id = '$sp->{id}'");
($r, $b) = call('GET', "/api/sessions/$sp->{id}");
my $before = $b;
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}",
    json => { title => '  Renamed  ' });
is($r->{status}, 200, 'patch title: 200');
is($b->{title}, 'Renamed', 'title stripped and set');
is($b->{status}, 'active', 'status unchanged');
is($b->{created_at}, $before->{created_at}, 'created_at unchanged');
ok($b->{updated_at} gt $before->{updated_at}, 'updated_at moved on');
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}",
    json => { status => 'archived' });
is($r->{status}, 200, 'archive: 200');
is($b->{status}, 'archived', 'archived');
is($b->{title}, 'Renamed', 'title unchanged');
is(sql("SELECT status FROM fleet_sessions WHERE id = '$sp->{id}'"),
    'archived', 'archived in the database');
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}",
    json => { status => 'active', title => 'Both', other => 1 });
is("$r->{status} $b->{status} $b->{title}", '200 active Both',
    'both fields at once');
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}",
    json => { title => 'v' x 300, status => undef });
is($b->{title}, 'v' x 255, 'patch title truncated to 255');

for my $t ([{}, 'session_no_fields', 'no fields'],
    [{ title => undef, status => undef }, 'session_no_fields', 'null fields'],
    [{ other => 'x' }, 'session_no_fields', 'only unknown fields'],
    [{ title => " \t " }, 'session_title_empty', 'blank title'],
    [{ title => '' }, 'session_title_empty', 'empty title'],
    [{ status => 'deleted' }, 'session_status_invalid', 'bad status'],
    [{ status => 'Active' }, 'session_status_invalid', 'status case'],
    [{ title => 'ok', status => 'gone' }, 'session_status_invalid',
     'good title, bad status'],
    [{ status => 1 }, 'validation_error', 'number status'],
    [{ title => {} }, 'validation_error', 'object title']) {
	($r, $b) = call('PATCH', "/api/sessions/$sp->{id}", json => $t->[0]);
	err_is($r, $b, 422, $t->[1], "patch: $t->[2]");
}
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}",
    headers => { 'content-type' => 'application/json' });
err_is($r, $b, 422, 'validation_error', 'patch: empty body');
($r, $b) = call('PATCH', "/api/sessions/$sp->{id}", json => '[1]');
err_is($r, $b, 422, 'validation_error', 'patch: array body');
($r, $b) = call('PATCH', "/api/sessions/$NOBODY", json => { title => 'x' });
err_is($r, $b, 404, 'session_not_found', 'patch unknown session',
    'Session not found');
is(sql("SELECT title || '|' || status FROM fleet_sessions "
    . "WHERE id = '$sp->{id}'"), ('v' x 255) . '|active',
    'refused patches changed nothing');

# A Session of another workspace is as missing as an unknown one.
my $foreign = 'f0f0f0f0-0000-4000-8000-000000000001';
sql("INSERT INTO fleet_workspaces (id, name) VALUES ('$OTHER_WS', 'other');"
    . "INSERT INTO fleet_sessions (id, workspace_id, title) VALUES "
    . "('$foreign', '$OTHER_WS', 'Foreign alpha')");
($r, $b) = call('GET', "/api/sessions/$foreign");
err_is($r, $b, 404, 'session_not_found', 'foreign session: get');
($r, $b) = call('PATCH', "/api/sessions/$foreign", json => { title => 'x' });
err_is($r, $b, 404, 'session_not_found', 'foreign session: patch');
is(sql("SELECT title FROM fleet_sessions WHERE id = '$foreign'"),
    'Foreign alpha', 'foreign session untouched');

# --- Sessions: list ------------------------------------------------------

sql("DELETE FROM fleet_sessions WHERE workspace_id = '$WS'");
my @made;
for my $i (1 .. 25) {
	my $t = sprintf('s%02d', $i);
	$t = 'Alpha report' if $i == 3;
	$t = 'the ALPHA notes' if $i == 7;
	$t = '100% done' if $i == 9;
	$t = 'a_b' if $i == 10;
	$t = 'back\\slash' if $i == 11;
	my $s = (call('POST', '/api/sessions', json => { title => $t }))[1];
	push @made, $s;
	# Session i was updated i minutes after the epoch of this test.
	sql("UPDATE fleet_sessions SET updated_at = "
	    . "'2026-01-01T00:00:00Z'::timestamptz + make_interval(mins => $i) "
	    . "WHERE id = '$s->{id}'");
}
my @newest = map { $_->{id} } reverse @made;

($r, $b) = call('GET', '/api/sessions');
is($r->{status}, 200, 'list: 200');
is(join(',', sort keys %$b), 'has_more,items,limit,offset,total',
    'SessionListResponse fields');
is($b->{total}, 25, 'total counts only our workspace');
is($b->{limit}, 20, 'default limit 20');
is($b->{offset}, 0, 'default offset 0');
is(scalar @{ $b->{items} }, 20, '20 items');
ok($b->{has_more} && JSON::PP::is_bool($b->{has_more}), 'has_more true');
is_deeply([map { $_->{id} } @{ $b->{items} }], [@newest[0 .. 19]],
    'newest updated first');
is($b->{items}[0]{updated_at}, '2026-01-01T00:25:00.000000+00:00',
    'updated_at of the newest, in UTC');
is(canon($b->{items}[1]),
    canon((call('GET', "/api/sessions/$newest[1]"))[1]),
    'a summary is the detail document');

($r, $b) = call('GET', '/api/sessions?limit=10&offset=20');
is(scalar @{ $b->{items} }, 5, 'last page: 5 items');
ok(!$b->{has_more} && JSON::PP::is_bool($b->{has_more}), 'has_more false');
is_deeply([map { $_->{id} } @{ $b->{items} }], [@newest[20 .. 24]],
    'the oldest five');
is("$b->{limit} $b->{offset} $b->{total}", '10 20 25', 'echoes paging');
($r, $b) = call('GET', '/api/sessions?limit=5&offset=5');
is_deeply([map { $_->{id} } @{ $b->{items} }], [@newest[5 .. 9]],
    'middle page');
ok($b->{has_more}, 'has more after it');
($r, $b) = call('GET', '/api/sessions?limit=5&offset=20');
ok(!$b->{has_more}, 'offset+items == total: no more');
for my $off (25, 1000) {
	($r, $b) = call('GET', "/api/sessions?offset=$off");
	is($r->{status}, 200, "offset $off: 200");
	is(scalar @{ $b->{items} }, 0, "offset $off: no items");
	is($b->{total}, 25, "offset $off: total still 25");
	ok(!$b->{has_more}, "offset $off: no more");
}
($r, $b) = call('GET', '/api/sessions?limit=100');
is(scalar @{ $b->{items} }, 25, 'limit 100 allowed');
($r, $b) = call('GET', '/api/sessions?limit=1');
is(scalar @{ $b->{items} }, 1, 'limit 1 allowed');

for my $q ('limit=0', 'limit=101', 'limit=-1', 'limit=abc', 'limit=1.5',
    'limit=', 'limit=1e2', 'offset=-1', 'offset=x', 'offset=',
    'limit=99999999999999999999', 'status=bogus', 'status=',
    'status=ACTIVE', 'search=' . ('z' x 1025), 'search=%FF', 'limit') {
	($r, $b) = call('GET', "/api/sessions?$q");
	err_is($r, $b, 422, 'validation_error', 'list: ' . substr($q, 0, 20));
}

($r, $b) = call('GET', '/api/sessions?search=alpha');
is($b->{total}, 2, 'search is case-insensitive "contains"');
is_deeply([map { $_->{title} } @{ $b->{items} }],
    ['the ALPHA notes', 'Alpha report'], 'both alphas, newest first');
($r, $b) = call('GET', '/api/sessions?search=%25');
is_deeply([map { $_->{title} } @{ $b->{items} }], ['100% done'],
    '% is literal');
($r, $b) = call('GET', '/api/sessions?search=_');
is_deeply([map { $_->{title} } @{ $b->{items} }], ['a_b'], '_ is literal');
($r, $b) = call('GET', '/api/sessions?search=%5C');
is_deeply([map { $_->{title} } @{ $b->{items} }], ['back\\slash'],
    'backslash is literal');
($r, $b) = call('GET', '/api/sessions?search=');
is($b->{total}, 25, 'empty search: no filter');
($r, $b) = call('GET', '/api/sessions?search=nothing+like+it');
is("$b->{total} " . scalar @{ $b->{items} }, '0 0', 'no match');
($r, $b) = call('GET', '/api/sessions?search=s2&limit=2');
is("$b->{total} " . scalar(@{ $b->{items} }) . ' ' . ($b->{has_more} ? 1 : 0),
    '6 2 1', 'search with paging');

for my $i (0 .. 2) {
	call('PATCH', "/api/sessions/$newest[$i]", json => { status => 'archived' });
}
($r, $b) = call('GET', '/api/sessions?status=archived');
is($b->{total}, 3, 'status=archived');
is_deeply([sort map { $_->{id} } @{ $b->{items} }], [sort @newest[0 .. 2]],
    'the three archived');
($r, $b) = call('GET', '/api/sessions?status=active&limit=100');
is($b->{total}, 22, 'status=active');
ok(!grep({ $_->{status} ne 'active' } @{ $b->{items} }), 'all active');
($r, $b) = call('GET', '/api/sessions?status=archived&search=s2');
is($b->{total}, 3, 'status and search together');
call('PATCH', "/api/sessions/$newest[24]", json => { title => 'Touched' });
($r, $b) = call('GET', '/api/sessions?limit=1');
is($b->{items}[0]{id}, $newest[24], 'a patched session becomes the newest');

# --- Turn history --------------------------------------------------------

my $hs = (call('POST', '/api/sessions', json => { title => 'History' }))[1];
($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns");
is($r->{status}, 200, 'turns of a new session: 200');
is(canon($b), '{"items":[],"next_after_sequence":null}', 'empty page');

my $fp = 'a' x 64;
my @runs = map { sprintf('00000000-0000-4000-8000-%012d', $_) } 1 .. 3;
my @users = map { sprintf('00000000-0000-4000-9000-%012d', $_) } 1 .. 3;
my $att = '11111111-2222-4333-8444-555555555555';
my $att2 = '11111111-2222-4333-8444-666666666666';
my $committed = {
	schema_version => 1,
	trace_id => 'tr-1',
	parts => [
		{ type => 'status', phase => 'execution', status => 'running',
		  message => 'working' },
		{ type => 'step', state => 'started', step => 1 },
		{ type => 'reasoning', text => 'Think first.' },
		{ type => 'code', code => 'print(1)', step => 1 },
		{ type => 'output', output => "1\n", step => 1 },
		{ type => 'step', state => 'finished', step => 1,
		  duration_ms => 1234 },
		{ type => 'attachment', attachment_id => $att, phase => 'read',
		  filename => 'a.txt', byte_size => 5 },
		{ type => 'warning', message => 'careful', code => 'w1' },
		{ type => 'child_progress', child_id => 'c1',
		  task_label => 'sub', state => 'completed', elapsed_ms => 7,
		  cleanup_state => 'complete', evidence => ['e'] },
		{ type => 'mystery', foo => 1 },
		{ type => 'artifact', artifact_id => $att2, kind => 'markdown',
		  title => 'Report', media_type => 'text/markdown',
		  byte_size => 42, checksum_sha256 => 'b' x 64 },
		{ type => 'usage', usage => { iterations => 2,
		  duration_ms => 1500, observed_lm_usage => { tokens => 9 } } },
		{ type => 'text', text => 'The answer is 1.' },
	],
};
my $expect_assistant = {
	id => $runs[0], role => 'assistant',
	metadata => { schemaVersion => 1, runId => $runs[0],
	    sessionId => $hs->{id}, sequence => 2, traceId => 'tr-1' },
	parts => [
		{ type => 'data-status', data => { phase => 'execution',
		  status => 'running', message => 'working' } },
		{ type => 'data-step', data => { state => 'started', step => 1 } },
		{ type => 'reasoning', text => 'Think first.', state => 'done' },
		{ type => 'data-rlm-code', data => { code => 'print(1)',
		  step => 1 } },
		{ type => 'data-rlm-output', data => { output => "1\n",
		  step => 1 } },
		{ type => 'data-step', data => { state => 'finished', step => 1,
		  durationMs => 1234 } },
		{ type => 'data-attachment', data => { attachmentId => $att,
		  phase => 'read', filename => 'a.txt', byteSize => 5 } },
		{ type => 'data-warning', data => { message => 'careful',
		  code => 'w1' } },
		{ type => 'data-child-progress', data => { child_id => 'c1',
		  task_label => 'sub', state => 'completed', elapsed_ms => 7,
		  cleanup_state => 'complete', evidence => ['e'] } },
		{ type => 'data-artifact', data => { artifactId => $att2,
		  kind => 'markdown', title => 'Report',
		  mediaType => 'text/markdown', byteSize => 42,
		  checksumSha256 => 'b' x 64 } },
		{ type => 'data-usage', data => { usage => { iterations => 2,
		  duration_ms => 1500, observed_lm_usage => { tokens => 9 } } } },
		{ type => 'text', text => 'The answer is 1.', state => 'done' },
	],
};
my $expect_user = {
	id => $users[0], role => 'user',
	metadata => { schemaVersion => 1, sessionId => $hs->{id},
	    sequence => 1, attachmentIds => [$att, $att2] },
	parts => [
		{ type => 'text', text => 'What is 1? ☃', state => 'done' },
		{ type => 'data-attachment', data => { attachmentId => $att,
		  phase => 'selected' } },
		{ type => 'data-attachment', data => { attachmentId => $att2,
		  phase => 'selected' } },
	],
};

sub add_turn {
	my ($n, $input, $ct) = @_;
	my $seq = 2 * $n - 1;
	my ($run, $user) = ($runs[$n - 1], $users[$n - 1]);
	my $in = $J->encode($input);
	my $c = $J->encode($ct);
	utf8::decode($in);
	utf8::decode($c);
	sql("INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
	    . "input_fingerprint, base_checkpoint_version, "
	    . "commit_checkpoint_version, finished_at) VALUES ('$run', "
	    . "'$hs->{id}', 'completed', 'key-$n', '$fp', " . ($n - 1)
	    . ", $n, now());"
	    . "INSERT INTO fleet_turns (id, session_id, run_id, sequence, role, "
	    . "user_input_json) VALUES ('$user', '$hs->{id}', '$run', $seq, "
	    . "'user', \$j\$$in\$j\$);"
	    . "INSERT INTO fleet_turns (id, session_id, run_id, sequence, role, "
	    . "committed_turn_json) VALUES ('$run', '$hs->{id}', '$run', "
	    . ($seq + 1) . ", 'assistant', \$j\$$c\$j\$)");
}
add_turn(1, { text => 'What is 1? ☃', attachment_ids => [$att, $att2] },
    $committed);
add_turn(2, { text => 'second', attachment_ids => [] },
    { schema_version => 1, parts => [{ type => 'text', text => 'two' },
    { type => 'step', state => 'bad-without-step' }] });
add_turn(3, { text => 'third' },
    { schema_version => 1, parts => [{ type => 'text', text => 'three' }] });

($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns");
is($r->{status}, 200, 'history: 200');
is(scalar @{ $b->{items} }, 6, 'six messages');
is(canon($b->{items}[0]), canon($expect_user), 'user message mapped exactly');
is(canon($b->{items}[1]), canon($expect_assistant),
    'assistant message mapped exactly (unknown part skipped)');
is(canon($b->{items}[2]), canon({ id => $users[1], role => 'user',
    parts => [{ type => 'text', text => 'second', state => 'done' }],
    metadata => { schemaVersion => 1, sessionId => $hs->{id}, sequence => 3,
    attachmentIds => [] } }), 'user message without attachments');
is(canon($b->{items}[3]), canon({ id => $runs[1], role => 'assistant',
    parts => [{ type => 'text', text => 'two', state => 'done' }],
    metadata => { schemaVersion => 1, runId => $runs[1],
    sessionId => $hs->{id}, sequence => 4 } }),
    'no traceId without trace_id; a part missing a field is skipped');
is_deeply($b->{items}[4]{metadata}{attachmentIds}, [],
    'missing attachment_ids: empty list');
is_deeply([map { $_->{metadata}{sequence} } @{ $b->{items} }], [1 .. 6],
    'ordered by sequence');
ok(JSON::PP::is_bool($b->{next_after_sequence}) ||
    !defined $b->{next_after_sequence}, 'next_after_sequence null');
like($r->{content}, qr/"next_after_sequence":null/, 'literally null');

($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?limit=2");
is_deeply([map { $_->{metadata}{sequence} } @{ $b->{items} }], [1, 2],
    'limit 2: first two');
like($r->{content}, qr/"next_after_sequence":2[,}]/, 'next_after_sequence 2');
($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?limit=2&after_sequence=2");
is_deeply([map { $_->{metadata}{sequence} } @{ $b->{items} }], [3, 4],
    'next page');
is($b->{next_after_sequence}, 4, 'next_after_sequence 4');
($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?limit=2&after_sequence=4");
is_deeply([map { $_->{metadata}{sequence} } @{ $b->{items} }], [5, 6],
    'last page');
ok(!defined $b->{next_after_sequence}, 'exactly full last page: null');
($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?after_sequence=3&limit=200");
is_deeply([map { $_->{metadata}{sequence} } @{ $b->{items} }], [4, 5, 6],
    'after_sequence 3');
($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?after_sequence=6");
is(canon($b), '{"items":[],"next_after_sequence":null}', 'past the end');
for my $q ('limit=0', 'limit=201', 'limit=x', 'after_sequence=-1',
    'after_sequence=y', 'limit=') {
	($r, $b) = call('GET', "/api/sessions/$hs->{id}/turns?$q");
	err_is($r, $b, 422, 'validation_error', "turns: $q");
}
($r, $b) = call('GET', "/api/sessions/$NOBODY/turns");
err_is($r, $b, 404, 'session_not_found', 'turns of an unknown session',
    'Session not found');
($r, $b) = call('GET', "/api/sessions/$foreign/turns");
err_is($r, $b, 404, 'session_not_found', 'turns of a foreign session');

# --- Attachments ---------------------------------------------------------

sub multipart {
	my ($boundary, @parts) = @_;
	my $body = '';
	for my $p (@parts) {
		$body .= "--$boundary\r\nContent-Disposition: form-data; "
		    . "name=\"$p->{name}\"";
		$body .= "; filename=\"$p->{filename}\"" if defined $p->{filename};
		$body .= "\r\n";
		$body .= "Content-Type: $p->{type}\r\n" if defined $p->{type};
		$body .= "\r\n$p->{data}\r\n";
	}
	return $body . "--$boundary--\r\n";
}

# POST body to /api/attachments of base (default: the first fleetd).
sub upload {
	my ($body, $boundary, $base) = @_;
	my $ct = defined $boundary ?
	    "multipart/form-data; boundary=$boundary" : undef;
	my $r = $ua->request('POST', ($base // $f->{url}) . '/api/attachments',
	    { content => $body,
	    headers => { defined $ct ? ('content-type' => $ct) : () } });
	return ($r, eval { $J->decode($r->{content}) });
}

my $small = "hello world\n";
($r, $b) = upload(multipart('XyZ', { name => 'note', data => 'ignored' },
    { name => 'attachment', filename => 'notes.txt', type => 'text/plain',
      data => $small }), 'XyZ');
is($r->{status}, 201, 'upload: 201');
like($b->{id} // '', $UUID_RE, 'an id');
is($b->{filename}, 'notes.txt', 'filename');
is($b->{content_type}, 'text/plain', 'content type of the part');
is($b->{byte_size}, 12, 'byte_size');
like($r->{content}, qr/"byte_size":12[,}]/, 'byte_size is a number');
is($b->{checksum_sha256}, sha256_hex($small), 'sha256');
is(join(',', sort keys %$b),
    'byte_size,checksum_sha256,content_type,filename,id',
    'exactly the AttachmentResponse fields');
like($r->{headers}{'x-request-id'} // '', $UUID_RE, 'x-request-id');
my $a1 = $b;
is(sql("SELECT encode(sha256(content), 'hex') || ' ' || octet_length(content)"
    . " || ' ' || encode(content, 'escape') || workspace_id "
    . "FROM fleet_attachments WHERE id = '$a1->{id}'"),
    sha256_hex($small) . " 12 $small$WS", 'the bytes are in the row');
($r, $b) = call('GET', "/api/attachments/$a1->{id}");
is($r->{status}, 200, 'get attachment: 200');
is(canon($b), canon($a1), 'same document as the upload answered');
($r, $b) = call('GET', "/api/attachments/$NOBODY");
err_is($r, $b, 404, 'attachment_not_found', 'unknown attachment',
    'Attachment not found');
my $fa = 'f0f0f0f0-0000-4000-8000-0000000000a1';
sql("INSERT INTO fleet_attachments (id, workspace_id, filename, byte_size, "
    . "checksum_sha256, content) VALUES ('$fa', '$OTHER_WS', 'x', 0, "
    . "'" . sha256_hex('') . "', '')");
($r, $b) = call('GET', "/api/attachments/$fa");
err_is($r, $b, 404, 'attachment_not_found', 'foreign attachment');

# Ten million bytes of every value, through a long browser-style boundary.
srand(20261129);
my $big = pack('N*', map { int rand 4294967296 } 1 .. 2_500_000);
$big .= join('', map { chr } 0 .. 255) . "\r\n--\r\n";
substr($big, 10_000_000) = '';
is(length $big, 10_000_000, '10,000,000 bytes to send');
my $bb = '----WebKitFormBoundaryq8Zr4f0Xx1Lm2Nk3';
ok(index($big, $bb) < 0, 'boundary absent from the data');
($r, $b) = upload(multipart($bb, { name => 'attachment',
    filename => 'big.bin', type => 'application/octet-stream',
    data => $big }), $bb);
is($r->{status}, 201, 'large upload: 201') or diag($r->{content});
is($b->{byte_size}, 10_000_000, 'byte_size 10000000');
is($b->{checksum_sha256}, sha256_hex($big), 'sha256 of 10 MB');
is(sql("SELECT encode(sha256(content), 'hex') || ' ' || octet_length(content)"
    . " || ' ' || checksum_sha256 FROM fleet_attachments "
    . "WHERE id = '$b->{id}'"),
    sha256_hex($big) . ' 10000000 ' . sha256_hex($big),
    'the database holds exactly those bytes');

my %names = (
	'no filename' => [undef, 'upload.bin'],
	'empty filename' => ['', 'upload.bin'],
	'path' => ['../../etc/evil.sh', 'evil.sh'],
	'windows path' => ['C:\\dir\\file.txt', 'file.txt'],
	'padded' => ['  spaced name.txt ', 'spaced name.txt'],
	'unicode' => ['résumé.pdf', 'résumé.pdf'],
);
for my $k (sort keys %names) {
	my ($in, $want) = @{ $names{$k} };
	my $fn = $in;
	utf8::encode($fn) if defined $fn;
	($r, $b) = upload(multipart('b0und', { name => 'attachment',
	    filename => $fn, data => 'x' }), 'b0und');
	is($r->{status}, 201, "filename $k: 201");
	is($b->{filename}, $want, "filename $k: $want");
	ok(exists $b->{content_type} && !defined $b->{content_type},
	    "filename $k: no part type, content_type null");
}
($r, $b) = upload(multipart('b0und', { name => 'attachment',
    filename => 'empty.txt', type => 'text/plain', data => '' }), 'b0und');
is($r->{status}, 201, 'empty file: 201');
is("$b->{byte_size} $b->{checksum_sha256}", '0 ' . sha256_hex(''),
    'empty file: size 0, sha256 of nothing');
($r, $b) = upload("--q\r\nContent-Disposition: form-data; name=attachment; "
    . "filename=t.txt\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    . "x\r\n--q--", 'q');
is($r->{status}, 201, 'unquoted parameters, no final CRLF: 201');
is($b->{content_type}, 'text/plain; charset=utf-8', 'full part type kept');

my $ok_part = "Content-Disposition: form-data; name=\"attachment\"; "
    . "filename=\"a.txt\"\r\n\r\ndata\r\n";
for my $t (
    [multipart('b', { name => 'other', filename => 'a', data => 'x' }), 'b',
     'no attachment part'],
    [multipart('b', { name => 'attachment', filename => 'a', data => 'x' },
     { name => 'attachment', filename => 'b', data => 'y' }), 'b',
     'two attachment parts'],
    ["--b\r\n$ok_part", 'b', 'no close delimiter'],
    ["--b\n" . ($ok_part =~ s/\r\n/\n/gr) . "--b--\n", 'b', 'LF line ends'],
    [multipart('b', { name => 'attachment', filename => 'a', data => 'x' }),
     undef, 'form content type'],
    [multipart('b', { name => 'attachment', filename => 'a', data => 'x' }),
     'c', 'wrong boundary'],
    ["--b\r\nContent-Disposition: form-data; name=\"attachment\"\r\n"
     . "Content-Type: multipart/mixed; boundary=c\r\n\r\n--c\r\n\r\nx\r\n"
     . "--c--\r\n--b--\r\n", 'b', 'nested multipart'],
    ["--b\r\nX-Big: " . ('h' x 8200) . "\r\n$ok_part--b--\r\n", 'b',
     'part headers over 8 KiB'],
    ["--b\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nx\r\n"
     . "--b--\r\n", 'b', 'part without a name'],
    [multipart('b', { name => 'attachment', filename => '../', data => 'x' }),
     'b', 'filename empty once sanitised'],
    [multipart('b', { name => 'attachment', filename => "\xff.txt",
     data => 'x' }), 'b', 'filename not UTF-8'],
    [multipart('b', { name => 'attachment', filename => 'a',
     type => 't/' . ('x' x 300), data => 'x' }), 'b', 'part type too long'],
    ['', 'b', 'empty body'],
    ) {
	($r, $b) = upload($t->[0], $t->[1]);
	err_is($r, $b, 400, 'attachment_invalid', "upload: $t->[2]");
}
($r, $b) = call('POST', '/api/attachments', json => { attachment => 'x' });
err_is($r, $b, 400, 'attachment_invalid', 'upload: a JSON body');
($r, $b) = call('POST', '/api/attachments', content => 'x',
    headers => { 'content-type' => 'multipart/form-data' });
err_is($r, $b, 400, 'attachment_invalid', 'upload: no boundary parameter');
is(sql("SELECT count(*) FROM fleet_attachments WHERE workspace_id = '$WS'"),
    1 + 1 + scalar(keys %names) + 2, 'refused uploads stored nothing');

# --- Run cancellation ----------------------------------------------------

sub session_row {
	my ($id) = @_;
	sql("INSERT INTO fleet_sessions (id, workspace_id) VALUES ('$id', "
	    . "'$WS')");
}
my %run;
my $n = 0;
for my $st (qw(running settling completed failed cancelled timeout)) {
	$n++;
	my $sid = sprintf('5e55e55e-0000-4000-8000-%012d', $n);
	my $rid = sprintf('0ca0ca0c-0000-4000-8000-%012d', $n);
	session_row($sid);
	my %c = (
		running => "claim_owner, claim_heartbeat_at) VALUES "
		    . "('$rid', '$sid', 'running', 'k', '$fp', 0, 'me', now())",
		settling => "claim_owner, claim_heartbeat_at, failure_code, "
		    . "terminal_intent) VALUES ('$rid', '$sid', 'settling', 'k', "
		    . "'$fp', 0, 'me', now(), 'cancelled', 'cancelled')",
		completed => "commit_checkpoint_version, finished_at) VALUES "
		    . "('$rid', '$sid', 'completed', 'k', '$fp', 0, 1, now())",
	);
	my $v = $c{$st} // "failure_code, finished_at) VALUES ('$rid', '$sid', "
	    . "'$st', 'k', '$fp', 0, 'x', now())";
	sql("INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
	    . "input_fingerprint, base_checkpoint_version, $v");
	$run{$st} = $rid;
}

($r, $b) = call('PUT', "/api/runs/$run{running}/cancellation");
is($r->{status}, 200, 'cancel a running Run: 200');
is(canon($b), canon({ run_id => $run{running}, state => 'requested' }),
    'state requested');
like($r->{headers}{'x-request-id'} // '', $UUID_RE, 'x-request-id');
my $at = sql("SELECT cancel_requested_at FROM fleet_runs "
    . "WHERE id = '$run{running}'");
ok($at ne '', 'cancel_requested_at set');
($r, $b) = call('PUT', '/api/runs/' . uc($run{running}) . '/cancellation');
is($r->{status}, 200, 'again: 200');
is(canon($b), canon({ run_id => $run{running},
    state => 'already_requested' }), 'already_requested, id in lower case');
is(sql("SELECT cancel_requested_at FROM fleet_runs "
    . "WHERE id = '$run{running}'"), $at, 'cancel_requested_at kept');
is(sql("SELECT status FROM fleet_runs WHERE id = '$run{running}'"),
    'running', 'the Run itself is left to its worker');
for my $st (qw(settling completed failed cancelled timeout)) {
	($r, $b) = call('PUT', "/api/runs/$run{$st}/cancellation");
	is($r->{status}, 200, "cancel a $st Run: 200");
	is(canon($b), canon({ run_id => $run{$st},
	    state => 'already_terminal' }), "$st: already_terminal");
	is(sql("SELECT cancel_requested_at IS NULL FROM fleet_runs "
	    . "WHERE id = '$run{$st}'"), 't', "$st: nothing recorded");
}
($r, $b) = call('PUT', "/api/runs/$NOBODY/cancellation");
err_is($r, $b, 404, 'run_not_found', 'unknown Run', 'Run not found');
my $frun = 'f0f0f0f0-0000-4000-8000-0000000000c1';
sql("INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
    . "input_fingerprint, base_checkpoint_version, claim_owner, "
    . "claim_heartbeat_at) VALUES ('$frun', '$foreign', 'running', 'k', "
    . "'$fp', 0, 'me', now())");
($r, $b) = call('PUT', "/api/runs/$frun/cancellation");
err_is($r, $b, 404, 'run_not_found', 'Run of a foreign session');
is(sql("SELECT cancel_requested_at IS NULL FROM fleet_runs "
    . "WHERE id = '$frun'"), 't', 'foreign Run untouched');
($r, $b) = call('PUT', '/api/runs/nope/cancellation');
err_is($r, $b, 422, 'validation_error', 'malformed run id');

# --- Database errors: 503 with the route's code --------------------------

sql('ALTER TABLE fleet_sessions RENAME TO fleet_sessions_away');
for my $t (['GET', '/api/sessions'], ['POST', '/api/sessions'],
    ['GET', "/api/sessions/$hs->{id}"],
    ['PATCH', "/api/sessions/$hs->{id}", json => { title => 'x' }],
    ['GET', "/api/sessions/$hs->{id}/turns"],
    ['PUT', "/api/runs/$run{running}/cancellation"]) {
	($r, $b) = call(@$t);
	err_is($r, $b, 503, 'service_unavailable',
	    "database error: $t->[0] $t->[1]");
}
sql('ALTER TABLE fleet_sessions_away RENAME TO fleet_sessions');
sql('ALTER TABLE fleet_attachments RENAME TO fleet_attachments_away');
($r, $b) = upload(multipart('b', { name => 'attachment', filename => 'a',
    data => 'x' }), 'b');
err_is($r, $b, 503, 'attachment_unavailable', 'database error: upload');
($r, $b) = call('GET', "/api/attachments/$a1->{id}");
err_is($r, $b, 503, 'attachment_unavailable', 'database error: attachment');
sql('ALTER TABLE fleet_attachments_away RENAME TO fleet_attachments');
($r, $b) = call('GET', "/api/sessions/$hs->{id}");
is($r->{status}, 200, 'back once the tables are');

($rc) = $f->stop;
is($rc, 0, 'stop');

# --- The upload bound ----------------------------------------------------

my $g = Fleet->new(workers => 1, extra => "max_upload_bytes = 1M\n");
($rc, $out, $err) = $g->start;
is($rc, 0, 'fleetd with max_upload_bytes = 1M started') or BAIL_OUT($err);
my $mib = 'm' x 1_048_576;
($r, $b) = upload(multipart('b', { name => 'attachment', filename => 'a',
    data => $mib }), 'b', $g->{url});
is($r->{status}, 201, 'exactly 1 MiB: 201') or diag($r->{content});
is($b->{byte_size}, 1_048_576, 'byte_size 1048576');
($r, $b) = upload(multipart('b', { name => 'attachment', filename => 'a',
    data => "$mib!" }), 'b', $g->{url});
err_is($r, $b, 413, 'request_too_large', 'one byte more: 413');
($r, $b) = upload(multipart('b', { name => 'small', data => $mib },
    { name => 'attachment', filename => 'a', data => 'x' }), 'b', $g->{url});
is($r->{status}, 201, 'the bound is on the attachment, not other fields');
($rc, $out) = $g->psql('SELECT count(*) FROM fleet_attachments');
is($out, "2\n", 'the refused upload stored nothing');
($rc) = $g->stop;
is($rc, 0, 'stop');

done_testing;
