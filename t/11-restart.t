#!/usr/bin/perl
# kill -9 of each role's process: a new pid, restarts=1, ready again.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 2);
my ($rc, undef, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

for my $p ($f->procs) {
	my $name = "$p->{role} $p->{instance}";
	my $old = $p->{pid};
	ok(kill('KILL', $old), "kill -9 $name (pid $old)");
	my $new = wait_for(sub {
		my ($q) = grep { $_->{role} eq $p->{role} &&
		    $_->{instance} == $p->{instance} } $f->procs;
		return $q if $q && $q->{pid} && $q->{pid} != $old &&
		    $q->{state} eq 'ready';
	}, 10, "$name to come back");
	ok($new, "$name has a new pid and is ready");
	is($new->{restarts}, 1, "$name restarts=1") if $new;
	is($new->{last_exit}, 'signal 9', "$name last exit is signal 9")
	    if $new;
	ok(Fleet::pid_gone($old), "old $name is gone");
	my $ready = wait_for(sub {
		$f->http('GET', '/health/ready')->{status} == 200
	}, 10, 'ready again');
	ok($ready, "service ready again after $name restart");
	is($f->status->{state}, 'ready', 'supervisor still ready');
}
ok($f->log_count(qr/died after \d+ ms: signal 9/) >= 4,
    'every death is logged with its signal');
($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
