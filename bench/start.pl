#!/usr/bin/perl
# fleet start with the embedded database, cold (no cluster yet: initdb
# included) and warm (cluster reused), to ready.  Baselines in the same
# run: initdb + pg_ctl start -w, and pg_ctl start -w, by hand, of a
# cluster alike, as the same user: what PostgreSQL itself costs.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Fleet;
use File::Temp qw(tempdir);
use Time::HiRes qw(time);

my $runs = $ENV{BENCH_RUNS} // 5;
my $bindir = '/usr/lib/postgresql/15/bin';
my $user = $> == 0 ? 'fleet' : undef;

sub median { my @v = sort { $a <=> $b } @_; $v[$#v / 2] }

sub as_pg {
	my (@cmd) = @_;
	my @run = $user ? ('setpriv', '--reuid', $user, '--regid', $user,
	    '--init-groups', @cmd) : @cmd;
	my ($rc, $out, $err) = run_cmd(@run);
	die "@cmd: $err" if $rc;
}

my (@cold, @warm, @bcold, @bwarm);
for my $i (1 .. $runs) {
	my $f = Fleet->new(workers => 2);
	my $t0 = time;
	my ($rc, undef, $err) = $f->start;
	die "start: $err" if $rc;
	push @cold, (time - $t0) * 1000;
	$f->stop;
	$t0 = time;
	($rc, undef, $err) = $f->start;
	die "start: $err" if $rc;
	push @warm, (time - $t0) * 1000;
	$f->stop;

	my $d = tempdir(CLEANUP => 1);
	chmod 0711, $d;
	mkdir "$d/pg", 0700;
	chown((getpwnam($user))[2, 3], "$d/pg") if $user;
	$t0 = time;
	as_pg("$bindir/initdb", '-D', "$d/pg/data", '-U', 'fleet', '-A',
	    'trust', '-E', 'UTF8', '--locale=C.UTF-8');
	as_pg("$bindir/pg_ctl", '-D', "$d/pg/data", '-w', '-o',
	    "-c listen_addresses= -c unix_socket_directories=$d/pg", 'start');
	push @bcold, (time - $t0) * 1000;
	as_pg("$bindir/pg_ctl", '-D', "$d/pg/data", '-m', 'fast', 'stop');
	$t0 = time;
	as_pg("$bindir/pg_ctl", '-D', "$d/pg/data", '-w', '-o',
	    "-c listen_addresses= -c unix_socket_directories=$d/pg", 'start');
	push @bwarm, (time - $t0) * 1000;
	as_pg("$bindir/pg_ctl", '-D', "$d/pg/data", '-m', 'fast', 'stop');
}
printf "fleet start, cold (initdb):  median %6.0f ms   baseline initdb+pg_ctl "
    . "start -w %6.0f ms   ratio %.2f  (n=%d)\n", median(@cold),
    median(@bcold), median(@cold) / median(@bcold), $runs;
printf "fleet start, warm:           median %6.0f ms   baseline pg_ctl start "
    . "-w        %6.0f ms   ratio %.2f  (n=%d)\n", median(@warm),
    median(@bwarm), median(@warm) / median(@bwarm), $runs;
