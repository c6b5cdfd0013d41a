#!/usr/bin/perl
# Supervisor costs: the time from kill -9 of a turnworker to its
# replacement reporting ready, and the memory of each idle process.
# Baselines measured in the same run: fork+exec+wait of /bin/true from
# here (the floor of any process restart), and an idle /usr/bin/python3
# (the floor of one process of a Python server such as fleet-rlm).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Fleet;
use POSIX qw(floor);
use Time::HiRes qw(time);
use Time::Local qw(timegm);

my $runs = $ENV{BENCH_RUNS} // 20;

sub median {
	my @v = sort { $a <=> $b } @_;
	return $v[floor($#v / 2)] if @v % 2;
	return ($v[$#v / 2 - 0.5] + $v[$#v / 2 + 0.5]) / 2;
}

sub stamp {
	my ($line) = @_;
	$line =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)\.(\d+)Z/ or return;
	return timegm($6, $5, $4, $3, $2 - 1, $1) + ("0.$7");
}

sub rss_kb {
	my ($pid, $key) = @_;
	my $file = $key eq 'Pss' ? "/proc/$pid/smaps_rollup" : "/proc/$pid/status";
	open(my $fh, '<', $file) or return;
	while (<$fh>) { return $1 if /^$key:\s+(\d+) kB/ }
	return;
}

my $f = Fleet->new(workers => 2);
my ($rc, undef, $err) = $f->start;
die "start: $err" if $rc;

# Idle memory of every process.
my $st = $f->status;
my @rows = ([supervisor => $st->{pid}],
    map { [($_->{instance} ? "$_->{role} $_->{instance}" : $_->{role}),
    $_->{pid}] } @{$st->{processes}});
pipe(my $pr, my $pw) or die;
my $py = fork // die;
if ($py == 0) {
	close $pw;
	open(STDIN, '<&', $pr) or die;
	exec('/usr/bin/python3', '-I', '-S', '-c',
	    'import sys; sys.stdin.read()') or die;
}
close $pr;
# Wait for python to be up: its RSS stops growing once it blocks on read.
wait_for(sub { open(my $fh, '<', "/proc/$py/wchan") or return;
    my $w = <$fh> // ''; $w =~ /read|pipe|wait/ }, 5);
my $pyrss = rss_kb($py, 'VmRSS');
close $pw;
waitpid($py, 0);

printf "%-16s %8s %8s\n", 'process', 'RSS KiB', 'PSS KiB';
my ($tot_rss, $tot_pss) = (0, 0);
for my $r (@rows) {
	my ($rss, $pss) = (rss_kb($r->[1], 'VmRSS'), rss_kb($r->[1], 'Pss'));
	$tot_rss += $rss;
	$tot_pss += $pss;
	printf "%-16s %8d %8d\n", $r->[0], $rss, $pss;
}
printf "%-16s %8d %8d\n", 'total', $tot_rss, $tot_pss;
printf "%-16s %8d          (baseline: idle python3 -I -S)\n", 'python3',
    $pyrss;
printf "ratio: total fleet RSS / one idle python3 = %.2f\n\n",
    $tot_rss / $pyrss;

# kill -9 of a turnworker -> its replacement ready, from fleetd's log.
# Each victim must have lived past the 1 s quick-death window, or the
# restart would wait out a backoff instead.
my @lat;
for my $i (1 .. $runs) {
	Time::HiRes::sleep(1.1);
	my ($w) = grep { $_->{role} eq 'turnworker' && $_->{instance} == 1 }
	    $f->procs;
	my $old = $w->{pid} or die "turnworker 1 has no pid";
	my $t0 = time;
	kill('KILL', $old);
	my $line = wait_for(sub {
		open(my $fh, '<', $f->logfile) or return;
		my ($l) = grep { /turnworker 1 ready \(pid (\d+)/ && $1 != $old
		    && stamp($_) >= $t0 - 0.001 } <$fh>;
		return $l;
	}, 10) or die "no replacement for pid $old";
	push @lat, (stamp($line) - $t0) * 1000;
}
my @base;
for (1 .. $runs) {
	my $t0 = time;
	my $pid = fork // die;
	if ($pid == 0) { exec('/bin/true') or die }
	waitpid($pid, 0);
	push @base, (time - $t0) * 1000;
}
printf "kill -9 turnworker -> replacement ready: median %.2f ms "
    . "(min %.2f, max %.2f, n=%d)\n", median(@lat),
    (sort { $a <=> $b } @lat)[0], (sort { $a <=> $b } @lat)[-1], $runs;
printf "baseline fork+exec+wait /bin/true:       median %.2f ms\n",
    median(@base);
printf "ratio: %.2f\n", median(@lat) / median(@base);
$f->stop;
