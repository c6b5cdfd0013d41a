#!/usr/bin/perl
# The schema refuses what it must: two live Runs in a Session, a reused
# live idempotency key, malformed terminal shapes, bad turns and bytes.
# And it cascades deletes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 1);
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

my $fp = 'a' x 64;
my $ws = '7793d159-223b-5feb-a99c-f7696debb478';

sub sql_ok {
	my ($sql, $what) = @_;
	my ($rc, $out, $err) = $f->psql($sql);
	is($rc, 0, $what) or diag($err);
	return $out;
}

sub sql_refused {
	my ($sql, $constraint, $what) = @_;
	my ($rc, $out, $err) = $f->psql($sql);
	isnt($rc, 0, "$what is refused");
	like($err, qr/\Q$constraint\E/, "by $constraint");
}

my $s = sql_ok("INSERT INTO fleet_sessions (id, workspace_id) VALUES "
    . "(gen_random_uuid(), '$ws') RETURNING id", 'a session');
chomp $s;
my $run = sub {
	my ($key, $status, $extra) = @_;
	my %cols = (
	    running => "claim_owner, claim_heartbeat_at) VALUES ("
		. "'$s', 'running', '$key', '$fp', 0, 'w1', now())",
	    completed => "commit_checkpoint_version, finished_at) VALUES ("
		. "'$s', 'completed', '$key', '$fp', 0, 1, now())",
	    failed => "failure_code, finished_at) VALUES ("
		. "'$s', 'failed', '$key', '$fp', 0, 'execution_failed', now())",
	);
	return "INSERT INTO fleet_runs (id, session_id, status, "
	    . "idempotency_key, input_fingerprint, base_checkpoint_version, "
	    . ($extra // $cols{$status}) =~ s/VALUES \(/VALUES (gen_random_uuid(), /r;
};

sql_ok($run->('k1', 'running'), 'a running Run');
sql_refused($run->('k2', 'running'), 'uq_fleet_runs_one_running',
    'a second running Run in the Session');
sql_ok("UPDATE fleet_runs SET status = 'completed', claim_owner = NULL, "
    . "claim_heartbeat_at = NULL, commit_checkpoint_version = 1, "
    . "finished_at = now() WHERE idempotency_key = 'k1'", 'complete it');
sql_refused($run->('k1', 'running'), 'uq_fleet_runs_live_idempotency',
    'a new Run reusing a completed key');
sql_ok($run->('k2', 'failed'), 'a failed Run');
sql_ok($run->('k2', 'failed'), 'a second failed Run with that key');
sql_ok($run->('k2', 'running'), 'a failed key is free for a new Run');
sql_ok("DELETE FROM fleet_runs WHERE idempotency_key = 'k2'", 'clean up');

# Terminal shapes.
my $cols = "INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
    . "input_fingerprint, base_checkpoint_version, ";
sql_refused($cols . "claim_owner, commit_checkpoint_version, finished_at) "
    . "VALUES (gen_random_uuid(), '$s', 'completed', 'x', '$fp', 0, 'w', 1, "
    . "now())", 'ck_fleet_runs_terminal_shape', 'completed with a claim');
sql_refused($cols . "finished_at) VALUES (gen_random_uuid(), '$s', "
    . "'running', 'x', '$fp', 0, now())", 'ck_fleet_runs_terminal_shape',
    'running without a claim');
sql_refused($cols . "finished_at) VALUES (gen_random_uuid(), '$s', "
    . "'failed', 'x', '$fp', 0, now())", 'ck_fleet_runs_terminal_shape',
    'failed without a failure code');
sql_refused($cols . "claim_owner, claim_heartbeat_at, failure_code) VALUES "
    . "(gen_random_uuid(), '$s', 'settling', 'x', '$fp', 0, 'w', now(), "
    . "'cancelled')", 'ck_fleet_runs_terminal_shape',
    'settling without a terminal intent');
sql_refused($cols . "claim_owner, claim_heartbeat_at) VALUES "
    . "(gen_random_uuid(), '$s', 'exploded', 'x', '$fp', 0, 'w', now())",
    'ck_fleet_runs_status', 'an unknown status');
sql_refused($cols . "claim_owner, claim_heartbeat_at) VALUES "
    . "(gen_random_uuid(), '$s', 'running', 'x', 'nothex', 0, 'w', now())",
    'ck_fleet_runs_fingerprint', 'a malformed fingerprint');

# Turns.
my $r1 = sql_ok("SELECT id FROM fleet_runs WHERE idempotency_key = 'k1'",
    'the completed run');
chomp $r1;
sql_ok("INSERT INTO fleet_turns VALUES (gen_random_uuid(), '$s', '$r1', 1, "
    . "'user', '{}', NULL, now())", 'a user turn');
sql_refused("INSERT INTO fleet_turns VALUES (gen_random_uuid(), '$s', "
    . "'$r1', 1, 'assistant', NULL, '{}', now())",
    'uq_fleet_turns_session_sequence', 'a second turn with sequence 1');
sql_refused("INSERT INTO fleet_turns VALUES (gen_random_uuid(), '$s', "
    . "'$r1', 2, 'user', '{}', '{}', now())", 'ck_fleet_turns_role_shape',
    'a user turn with a committed body');
sql_refused("INSERT INTO fleet_turns VALUES (gen_random_uuid(), '$s', "
    . "gen_random_uuid(), 2, 'assistant', NULL, '{}', now())",
    'fk_fleet_turns_run_session', 'a turn of a Run of another session');

# Bytes and their digests.
my $sha = 'b' x 64;
sql_refused("INSERT INTO fleet_attachments (id, workspace_id, filename, "
    . "byte_size, checksum_sha256, content) VALUES (gen_random_uuid(), "
    . "'$ws', 'a.txt', 5, '$sha', 'abc')", 'ck_fleet_attachments_size',
    'an attachment whose size is not its length');
sql_refused("INSERT INTO fleet_attachments (id, workspace_id, filename, "
    . "byte_size, checksum_sha256, content) VALUES (gen_random_uuid(), "
    . "'$ws', 'a.txt', 3, 'XYZ', 'abc')", 'ck_fleet_attachments_sha256',
    'an attachment with a malformed digest');
sql_ok("INSERT INTO fleet_artifacts (id, workspace_id, session_id, run_id, "
    . "kind, media_type, byte_size, checksum_sha256, content) VALUES "
    . "(gen_random_uuid(), '$ws', '$s', '$r1', 'text', 'text/plain', 3, "
    . "'$sha', 'abc')", 'an artifact');
sql_refused("INSERT INTO fleet_artifacts (id, workspace_id, session_id, "
    . "run_id, kind, media_type, byte_size, checksum_sha256, content) VALUES "
    . "(gen_random_uuid(), '$ws', '$s', '$r1', 'binary', 'x/y', 3, '$sha', "
    . "'abc')", 'ck_fleet_artifacts_kind', 'an artifact of unknown kind');

# Deleting a Session takes its Runs, turns and artifacts with it.
sql_ok("DELETE FROM fleet_sessions WHERE id = '$s'", 'delete the session');
my $left = sql_ok("SELECT (SELECT count(*) FROM fleet_runs WHERE "
    . "session_id = '$s') + (SELECT count(*) FROM fleet_turns WHERE "
    . "session_id = '$s') + (SELECT count(*) FROM fleet_artifacts WHERE "
    . "session_id = '$s')", 'count what is left');
is($left, "0\n", 'runs, turns and artifacts went with it');

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
