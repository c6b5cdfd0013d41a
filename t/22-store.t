#!/usr/bin/perl
# The Run lifecycle queries (lib/store.c) against the embedded database:
# the C test, plain and under ASan+UBSan.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my @bins = grep { -x } map { "$Fleet::TOP/$_/t/unit/test_store" }
    qw(obj obj-san);
plan skip_all => 'test_store is not built (make unit)' unless @bins;
my $f = Fleet->new(workers => 1);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);
local $ENV{FLEET_TEST_DATABASE_URL} = $f->conninfo;
local $ENV{ASAN_OPTIONS} = 'detect_leaks=1';
for my $bin (@bins) {
	($rc, $out, $err) = run_cmd($bin);
	is($rc, 0, "$bin passes") or diag("$out$err");
	my ($n) = $out =~ /^1\.\.(\d+)/m;
	ok($n && $n > 20, "and ran its tests ($n)");
	unlike($out, qr/^not ok/m, 'with no failure');
}
($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
