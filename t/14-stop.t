#!/usr/bin/perl
# stop, and SIGTERM, leave no process, socket or pid file behind.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

for my $how ('fleet stop', 'SIGTERM') {
	my $f = Fleet->new(workers => 3);
	my ($rc, $out, $err) = $f->start;
	is($rc, 0, "started ($how)") or BAIL_OUT($err);
	my $st = $f->status;
	my @pids = ($st->{pid}, map { $_->{pid} } @{$st->{processes}});
	is(scalar @pids, 7, 'supervisor and six children');
	ok(-S $f->rundir . '/fleetd.sock', 'control socket exists');
	ok(-S $f->rundir . '/gateway.sock', 'gateway socket exists');
	ok(-f $f->rundir . '/fleetd.pid', 'pid file exists');

	if ($how eq 'fleet stop') {
		($rc, $out, $err) = $f->fleet('stop');
		is($rc, 0, 'fleet stop exits 0');
		like($out, qr/fleetd stopped/, 'and says so');
	} else {
		kill('TERM', $st->{pid});
		ok(wait_for(sub { Fleet::pid_gone($st->{pid}) }, 20,
		    'fleetd exit'), 'fleetd exits on SIGTERM');
	}
	$f->{started} = 0;
	my @left = grep { !Fleet::pid_gone($_) } @pids;
	is_deeply(\@left, [], 'no process left behind');
	opendir(my $d, $f->rundir) or die;
	my @files = grep { !/^\.\.?$/ } readdir($d);
	is_deeply(\@files, ['pg'], 'run directory holds only the database '
	    . 'socket directory: no socket, no pid file');
	opendir($d, $f->rundir . '/pg') or die;
	@files = grep { !/^\.\.?$/ } readdir($d);
	is_deeply(\@files, [], 'and the database left no socket behind');
	ok($f->log_wait(qr/fleetd: stopped/, 5), 'log says stopped');
}
done_testing;
