#!/usr/bin/perl
# drain flips /health/ready to 503 and undrain flips it back.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new;
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);
is($f->http('GET', '/health/ready')->{status}, 200, 'ready');

($rc, $out, $err) = $f->fleet('drain');
is($rc, 0, 'drain exits 0');
like($out, qr/draining/, 'drain says so');
my $r = $f->http('GET', '/health/ready');
is($r->{status}, 503, 'draining: /health/ready is 503');
my $b = json_decode($r->{content});
is($b->{code}, 'service_not_ready', 'with code service_not_ready');
like($b->{message}, qr/draining/, 'and a message');
is($f->http('GET', '/health')->{status}, 200, '/health stays 200');
is($f->status->{state}, 'draining', 'status says draining');

($rc, $out) = $f->fleet('drain', '--wait', '--timeout', '5');
is($rc, 0, 'drain --wait with nothing in flight returns at once');
like($out, qr/drained/, 'and says drained');

($rc, $out) = $f->fleet('undrain');
is($rc, 0, 'undrain exits 0');
is($f->http('GET', '/health/ready')->{status}, 200, 'ready again');
is($f->status->{state}, 'ready', 'status says ready');

($rc, $out, $err) = $f->fleet('undrain');
is($rc, 1, 'undrain when not draining fails');
like($err, qr/not draining/, 'and says why');

($rc, $out, $err) = $f->fleet('drain', '--timeout', 'soon');
is($rc, 2, 'bad --timeout is a usage error');
($rc, $out, $err) = $f->fleet('frobnicate');
is($rc, 2, 'unknown command is a usage error');
like($err, qr/unknown command 'frobnicate'/, 'named');

($rc) = $f->stop;
is($rc, 0, 'stop');
for my $cmd (qw(status drain undrain reload stop)) {
	($rc, $out, $err) = $f->fleet($cmd);
	is($rc, 3, "$cmd with fleetd stopped exits 3");
	like($err, qr/fleetd is not running/, "$cmd says not running");
}
done_testing;
