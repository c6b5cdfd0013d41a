#!/usr/bin/perl
# The sandbox pool: the cap holds under 50 concurrent acquirers, waiters
# are served first come first served, deadlines and a full queue refuse,
# a worker killed mid-lease frees its slot and its kernel, warm kernels
# are refilled.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use IO::Handle;
use IO::Select;
use Test::More;

my $tool = "$Fleet::TOP/obj/t/tools/leasetool";
plan skip_all => "$tool is not built" unless -x $tool;
my $ws = '7793d159-223b-5feb-a99c-f7696debb478';
my $CAP = 4;
my $f = Fleet->new(workers => 1, extra => "sandbox_max = $CAP\n"
    . "sandbox_warm = 1\nsandbox_queue_max = 60\n");
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

# A leasetool in the background, its stdout readable, its stdin ours.
sub spawn {
	my (@args) = @_;
	pipe(my $r, my $w) or die;
	pipe(my $ir, my $iw) or die;
	my $pid = fork // die;
	if ($pid == 0) {
		close $r;
		close $iw;
		open(STDOUT, '>&', $w) or die;
		open(STDIN, '<&', $ir) or die;
		exec($tool, '-r', $f->rundir, @args) or die;
	}
	close $w;
	close $ir;
	$iw->autoflush(1);
	return { pid => $pid, out => $r, in => $iw, lines => [] };
}

# Wait for the next JSON event of a tool (bounded).
sub next_event {
	my ($t, $timeout) = @_;
	my $sel = IO::Select->new($t->{out});
	return undef unless $sel->can_read($timeout // 20);
	my $line = readline($t->{out});
	return undef unless defined $line;
	push @{$t->{lines}}, $line;
	return json_decode($line);
}

sub finish {
	my ($t) = @_;
	close $t->{in};
	my @ev;
	while (defined(my $e = next_event($t, 20))) { push @ev, $e }
	waitpid($t->{pid}, 0);
	return @ev;
}

sub pool { $f->status->{pool} }

# Processes running as one of this fleetd's sandbox uids, by uid.
my $BASE;
sub sandbox_uids {
	my %u;
	$BASE //= pool()->{uid_base};
	opendir(my $d, '/proc') or die;
	for my $p (grep { /^\d+$/ } readdir $d) {
		open(my $fh, '<', "/proc/$p/status") or next;
		while (<$fh>) {
			if (/^Uid:\s+(\d+)/) {
				$u{$1}++ if $1 >= $BASE && $1 < $BASE + 1024;
				last;
			}
		}
	}
	return \%u;
}

ok(wait_for(sub { pool()->{warm} == 1 }, 20, 'warm kernel'),
    'one warm kernel at idle');
is(pool()->{max}, $CAP, "pool max is $CAP");

SKIP: {
	skip 'sandbox uids need root', 1 if $> != 0;
	my @slots = keys %{sandbox_uids()};
	is(scalar(@slots), 1, 'the warm kernel runs as one sandbox uid');
}

# 50 concurrent acquirers, each holding its lease for 150 ms.
my @tools = map { spawn('-w', $ws, '-H', '150', '-d', '60000') } 1 .. 50;
my ($maxlive, $maxuid, $over) = (0, 0, 0);
my %done;
my $deadline = time + 120;
while (keys %done < 50 && time < $deadline) {
	my $p = pool();
	$maxlive = $p->{active} if $p && $p->{active} > $maxlive;
	$over++ if $p && $p->{active} + $p->{warm} + $p->{booting} > $CAP;
	if ($> == 0) {
		for my $uid (keys %{sandbox_uids()}) {
			$maxuid = $uid if $uid > $maxuid;
		}
	}
	for my $i (0 .. $#tools) {
		next if $done{$i};
		my $sel = IO::Select->new($tools[$i]{out});
		next unless $sel->can_read(0);
		my $line = readline($tools[$i]{out});
		if (!defined $line) { $done{$i} = 1; next }
		push @{$tools[$i]{lines}}, $line;
	}
}
waitpid($_->{pid}, 0) for @tools;
is(scalar(keys %done), 50, 'all 50 acquirers finished');
my (@intervals, $granted);
for my $t (@tools) {
	my @ev = map { json_decode($_) } @{$t->{lines}};
	my ($g) = grep { $_->{event} eq 'granted' } @ev;
	my ($r) = grep { $_->{event} eq 'released' } @ev;
	next unless $g && $r;
	$granted++;
	push @intervals, [$g->{ms}, $r->{ms}];
}
is($granted, 50, 'every one was granted a sandbox');
# Overlap of grant..release intervals, from the tools' own clocks.
my @pts = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
    map { ([$_->[0], 1], [$_->[1], -1]) } @intervals;
my ($cur, $peak) = (0, 0);
for (@pts) { $cur += $_->[1]; $peak = $cur if $cur > $peak }
ok($peak <= $CAP, "at most $CAP leases at once (peak $peak)");
ok($peak >= 2, 'and leases did run concurrently');
ok($maxlive <= $CAP, "status never showed more than $CAP active");
is($over, 0, 'active + warm + booting never exceeded the cap');
SKIP: {
	skip 'sandbox uids need root', 1 if $> != 0;
	ok($maxuid < $BASE + $CAP, 'no process ever ran as a slot beyond '
	    . 'the cap');
}
is(pool()->{failed_total}, 0, 'no failures');

# FIFO: with every slot held, waiters are served in arrival order.
my @holders = map { spawn('-w', $ws) } 1 .. $CAP;
for my $h (@holders) {
	my $e = next_event($h);
	is($e && $e->{event}, 'granted', 'holder granted');
}
my @waiters;
for my $i (1 .. 3) {
	push @waiters, spawn('-w', $ws, '-H', '0');
	ok(wait_for(sub { pool()->{waiting} == $i }, 10, "waiter $i queued"),
	    "waiter $i is queued");
}
my @order;
for my $i (0 .. 2) {
	close $holders[$i]{in};
	my $e;
	for my $w (@waiters) {
		next if grep { $_ == $w } @order;
		my $sel = IO::Select->new($w->{out});
		if ($sel->can_read(10)) {
			$e = readline($w->{out});
			push @order, $w;
			last;
		}
	}
}
is_deeply([map { $_->{pid} } @order], [map { $_->{pid} } @waiters],
    'waiters were granted in arrival order');
finish($_) for @waiters;
finish($holders[$_]) for 0 .. 2;

# Deadline: with the slots held, a waiter with 300 ms gets refused.
my @more = map { spawn('-w', $ws) } 1 .. 3;
next_event($_) for @more;
my $t0 = time;
my $late = spawn('-w', $ws, '-d', '300');
my $e = next_event($late, 10);
is($e && $e->{event}, 'refused', 'a waiter past its deadline is refused');
is($e && $e->{code}, 'deadline', 'with code deadline');
like($e && $e->{message}, qr/deadline/, 'and a message');
finish($late);

# Worker killed mid-lease: its slot and its kernel go.
my $victim = $holders[3];
my $before = sandbox_uids();
kill('KILL', $victim->{pid});
waitpid($victim->{pid}, 0);
ok(wait_for(sub { pool()->{active} == 3 }, 10, 'slot freed'),
    'a lease holder killed with SIGKILL frees its slot');
SKIP: {
	skip 'sandbox uids need root', 1 if $> != 0;
	my $after;
	ok(wait_for(sub { $after = sandbox_uids();
	    keys(%$after) < keys(%$before) + 1 }, 10, 'kernel gone'),
	    'and its kernel is gone');
}
finish($_) for @more;

# Queue bound: a queue of 1 refuses the second waiter at once.
$f->stop;
my $g = Fleet->new(workers => 1, extra => "sandbox_max = 1\n"
    . "sandbox_warm = 0\nsandbox_queue_max = 1\n");
($rc, undef, $err) = $g->start;
is($rc, 0, 'a pool of one with a queue of one') or diag($err);
$f = $g;
my $one = spawn('-w', $ws);
is(next_event($one)->{event}, 'granted', 'first granted');
my $q1 = spawn('-w', $ws);
ok(wait_for(sub { pool()->{waiting} == 1 }, 10, 'queued'), 'second queued');
my $q2 = spawn('-w', $ws);
$e = next_event($q2, 10);
is($e && $e->{code}, 'queue_full', 'third is refused at once: queue_full');
is(pool()->{warm}, 0, 'sandbox_warm = 0: no warm kernel');
finish($_) for $q2, $one, $q1;
($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
