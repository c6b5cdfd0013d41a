#!/usr/bin/perl
# Sandbox leases: acquire to grant from the warm pool and cold (each
# lease boots a kernel), p50 and p99, through a running fleetd.  The
# cold figure is the baseline of the warm one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Fleet;

my $n = $ENV{BENCH_RUNS} // 50;
my %res;
for my $warm (1, 0) {
	my $f = Fleet->new(workers => 1, extra => "sandbox_warm = $warm\n");
	my ($rc, undef, $err) = $f->start;
	die "start: $err" if $rc;
	wait_for(sub { $f->status->{pool}{warm} == $warm }, 20);
	my ($brc, $out, $berr) = run_cmd("$Fleet::TOP/obj/bench/lease_bench",
	    '-r', $f->rundir, '-n', $n, '-s', $warm ? 150 : 0);
	die "lease_bench: $berr" if $brc;
	$res{$warm} = json_decode($out);
	$f->stop;
}
printf "acquire -> grant, warm pool:  p50 %6.2f ms  p99 %6.2f ms  (n=%d)\n",
    $res{1}{acquire_ms_p50}, $res{1}{acquire_ms_p99}, $n;
printf "acquire -> grant, cold boot:  p50 %6.2f ms  p99 %6.2f ms  "
    . "(kernel boot in bwrap p50 %d ms)\n", $res{0}{acquire_ms_p50},
    $res{0}{acquire_ms_p99}, $res{0}{boot_ms_p50};
printf "ratio warm/cold p50: %.2f\n",
    $res{1}{acquire_ms_p50} / $res{0}{acquire_ms_p50};
