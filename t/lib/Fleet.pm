# Helpers for the integration tests: a private fleetd in a temporary state
# directory on an ephemeral port, driven through the real `fleet' command
# and a real HTTP client.  Nothing here sleeps to synchronise: every wait
# is on a condition, with a bounded timeout.
package Fleet;

use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use HTTP::Tiny;
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Test::More;
use Time::HiRes qw(time sleep);
use Exporter 'import';

our @EXPORT = qw(wait_for json_decode run_cmd sse_events sse_run_id);

our $TOP = abs_path(dirname(__FILE__) . '/../..');
our $BIN = "$TOP/bin";

sub json_decode { JSON::PP->new->decode($_[0]) }

# The data: payloads of a captured SSE body, [DONE] included, in order.
sub sse_events {
	my ($path) = @_;
	open(my $fh, '<', $path) or return ();
	local $/ = "\n\n";
	return map { /^data: (.*)\n\n\z/s ? $1 : () } <$fh>;
}

# Wait for the start chunk of a captured SSE body; returns its Run id.
sub sse_run_id {
	my ($path, $timeout) = @_;
	return wait_for(sub {
		for (sse_events($path)) {
			return $1 if /"messageId":"([0-9a-f-]+)"/;
		}
		return;
	}, $timeout, 'start');
}

# Run a command; returns (exit status, stdout, stderr).
sub run_cmd {
	my (@cmd) = @_;
	my $dir = tempdir(CLEANUP => 1);
	my $pid = fork // die "fork: $!";
	if ($pid == 0) {
		open(STDOUT, '>', "$dir/out") or die;
		open(STDERR, '>', "$dir/err") or die;
		exec(@cmd) or die "exec $cmd[0]: $!";
	}
	waitpid($pid, 0);
	my $status = $? >> 8;
	$status = 128 + ($? & 127) if $? & 127;
	local $/;
	open(my $o, '<', "$dir/out") or die;
	open(my $e, '<', "$dir/err") or die;
	return ($status, scalar(<$o>) // '', scalar(<$e>) // '');
}

# Poll cond every 20 ms until it returns true or timeout seconds pass.
sub wait_for {
	my ($cond, $timeout, $what) = @_;
	my $deadline = time + ($timeout // 10);
	while (time < $deadline) {
		my $v = eval { $cond->() };
		return $v if $v;
		sleep 0.02;
	}
	diag("timed out after ${timeout}s waiting for $what") if $what;
	return undef;
}

# new(config => "ini text" | profile sections..., workers => N)
sub new {
	my ($class, %o) = @_;
	my $dir = tempdir('fleet-test-XXXXXX', TMPDIR => 1,
	    CLEANUP => !$ENV{FLEET_TEST_KEEP});
	# The embedded database runs as another user when we are root: it
	# must be able to pass through (not list) our directory.
	chmod 0711, $dir;
	my $self = bless { dir => $dir, state => "$dir/state", owner => $$ },
	    $class;
	my $ini = $o{config} // "[fleet]\ndefault_profile = test\n\n"
	    . "[profile test]\nlisten = 127.0.0.1:0\n"
	    . "workers = " . ($o{workers} // 2) . "\n"
	    . "shutdown_timeout = 10\nkill_timeout = 2\nlog_level = debug\n"
	    . ($o{extra} // '');
	$self->write_config($ini);
	make_path($self->{state});
	return $self;
}

sub write_config {
	my ($self, $ini) = @_;
	$self->{conf} = "$self->{dir}/fleet.ini";
	open(my $fh, '>', $self->{conf}) or die "$self->{conf}: $!";
	print $fh $ini;
	close $fh;
}

sub fleet_args { my $s = shift; ("$BIN/fleet", '-c', $s->{conf}, '-d', $s->{state}) }

sub fleet { my ($s, @args) = @_; run_cmd($s->fleet_args, @args) }

sub logfile { "$_[0]{state}/log/fleetd.log" }

# libpq connection string of the embedded database (dbname fleet).
sub conninfo {
	my ($self, $db) = @_;
	return "host=$self->{state}/run/pg port=5432 user=fleet dbname="
	    . ($db // 'fleet');
}

# Run SQL with psql against the embedded database; returns (rc, out, err).
sub psql {
	my ($self, $sql, %o) = @_;
	return run_cmd('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
	    '-d', $o{conninfo} // $self->conninfo($o{db}), '-c', $sql);
}
sub rundir { "$_[0]{state}/run" }

sub start {
	my ($self, @args) = @_;
	my ($rc, $out, $err) = $self->fleet('start', '--port', '0', @args);
	if ($rc == 0) {
		chomp($self->{url} = $out);
		$self->{started} = 1;
	}
	return ($rc, $out, $err);
}

sub status {
	my $self = shift;
	my ($rc, $out, $err) = $self->fleet('status', '--json');
	return undef if $rc != 0;
	return json_decode($out);
}

sub http {
	my ($self, $method, $path, %o) = @_;
	my $h = HTTP::Tiny->new(timeout => 10);
	return $h->request($method, "$self->{url}$path", \%o);
}

sub procs {
	my ($self, $role) = @_;
	my $st = $self->status or return ();
	return grep { !defined($role) || $_->{role} eq $role }
	    @{$st->{processes}};
}

# Wait until the log holds a line matching re (after offset); returns it.
sub log_wait {
	my ($self, $re, $timeout) = @_;
	return wait_for(sub {
		open(my $fh, '<', $self->logfile) or return;
		while (<$fh>) { return $_ if /$re/ }
		return;
	}, $timeout // 10, "log line $re");
}

sub log_count {
	my ($self, $re) = @_;
	open(my $fh, '<', $self->logfile) or return 0;
	my $n = grep { /$re/ } <$fh>;
	return $n;
}

# A process is gone when /proc has no entry or shows a zombie.
sub pid_gone {
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 1;
	my $stat = <$fh>;
	return $stat =~ /\)\s+Z\s/ ? 1 : 0;
}

sub stop {
	my $self = shift;
	return unless $self->{started};
	$self->{started} = 0;
	return $self->fleet('stop');
}

# A scripted LM (bin/fleet-lmstub) on a free port: ($port, $logfile, $pid).
our @STUBS;
sub lmstub {
	my ($self, $script) = @_;
	my $n = scalar(@STUBS) + 1;
	my $sf = "$self->{dir}/lm$n.jsonl";
	my $lf = "$self->{dir}/lm$n.log";
	open(my $fh, '>', $sf) or die;
	print $fh $script;
	close $fh;
	pipe(my $r, my $w) or die;
	my $pid = fork // die;
	if ($pid == 0) {
		close $r;
		open(STDOUT, '>&', $w) or die;
		exec("$BIN/fleet-lmstub", '--listen', '127.0.0.1:0',
		    '--script', $sf, '--log', $lf) or die;
	}
	close $w;
	my $line = <$r>;
	die "fleet-lmstub did not start" unless $line &&
	    $line =~ /^listening 127\.0\.0\.1:(\d+)/;
	push @STUBS, [$pid, $$];
	$self->{stub_r} = $r;
	return ($1, $lf, $pid);
}

# The request bodies the stub saw, decoded.
sub lmlog {
	my ($self, $lf) = @_;
	open(my $fh, '<', $lf) or return ();
	return map { json_decode($_) } <$fh>;
}

sub session {
	my ($self) = @_;
	my $r = $self->http('POST', '/api/sessions',
	    headers => { 'content-type' => 'application/json' },
	    content => '{}');
	die "session: $r->{status} $r->{content}" unless $r->{status} == 201;
	return json_decode($r->{content})->{id};
}

# POST a Turn with curl (a real HTTP client) into a file; returns the
# body path.  With background => 1, returns (pid, path) at once.
sub turn_post {
	my ($self, $sid, $body, %o) = @_;
	my $n = ++$self->{turns};
	my $out = "$self->{dir}/turn$n.sse";
	my $head = "$self->{dir}/turn$n.head";
	my @cmd = ('curl', '-sS', '-N', '-o', $out, '-D', $head, '-X', 'POST',
	    "$self->{url}/api/sessions/$sid/turns",
	    '-H', 'Content-Type: application/json',
	    '-H', 'Idempotency-Key: ' . ($o{key} // "key-$n-$$"),
	    '--data-binary', $body, '--max-time', $o{max_time} // 120);
	if ($o{background}) {
		my $pid = fork // die;
		if ($pid == 0) {
			open(STDERR, '>', '/dev/null');
			exec(@cmd) or die;
		}
		return ($pid, $out, $head);
	}
	my ($rc, undef, $err) = run_cmd(@cmd);
	die "curl: $err" if $rc;
	return ($out, $head);
}

# Check a captured Turn body with the AI SDK checker; returns its summary
# (a hash with ok, types, text, error, ...) and its stderr.
sub check_stream {
	my ($self, $body, $head, $expect) = @_;
	my @cmd = ('node', "$TOP/t/js/check-stream.mjs", '--file', $body,
	    '--json');
	push @cmd, '--headers', $head if $head;
	push @cmd, '--expect', $expect if $expect;
	my ($rc, $out, $err) = run_cmd(@cmd);
	my $sum = eval { json_decode((split /\n/, $out)[-1] // '{}') } // {};
	$sum->{rc} = $rc;
	$sum->{stderr} = $err;
	return $sum;
}

sub have_checker { -d "$TOP/t/js/node_modules/ai" && !system('node -v >/dev/null 2>&1') }

# Only the process that started a stub or a fleetd stops it, not a child
# it forked.
END { kill('TERM', $_->[0]) for grep { $_->[1] == $$ } @STUBS }

sub DESTROY {
	my $self = shift;
	local ($?, $!, $@);
	if ($self->{started} && $self->{owner} == $$) {
		$self->fleet('stop');
	}
}

1;
