#!/usr/bin/perl
# Recovery takes over Runs whose claim heartbeat is older than
# stale_after and settles them; a fresh claim is left alone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Fleet;
use Test::More;

my $f = Fleet->new(workers => 1,
    extra => "heartbeat_seconds = 1\nstale_after = 30\n");
my ($rc, $out, $err) = $f->start;
is($rc, 0, 'started') or BAIL_OUT($err);

my $fp = 'c' x 64;
sub session {
	my (undef, $o) = $f->psql("INSERT INTO fleet_sessions (id, "
	    . "workspace_id) SELECT gen_random_uuid(), id FROM "
	    . "fleet_workspaces RETURNING id");
	chomp $o;
	return $o;
}
my ($s1, $s2, $s3) = (session(), session(), session());
my $ins = "INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
    . "input_fingerprint, base_checkpoint_version, claim_owner, "
    . "claim_heartbeat_at, failure_code, terminal_intent) VALUES ";
($rc, undef, $err) = $f->psql($ins
    . "(gen_random_uuid(), '$s1', 'running', 'stale', '$fp', 0, 'dead-worker', "
    . "now() - interval '1 hour', NULL, NULL), "
    . "(gen_random_uuid(), '$s2', 'running', 'fresh', '$fp', 0, 'live-worker', "
    . "now(), NULL, NULL), "
    . "(gen_random_uuid(), '$s3', 'settling', 'leaving', '$fp', 0, 'dead-2', "
    . "now() - interval '1 hour', 'cancelled', 'cancelled')");
is($rc, 0, 'a stale running Run, a fresh one, and a stale settling one')
    or diag($err);

my $state = sub {
	my ($key) = @_;
	my (undef, $o) = $f->psql("SELECT status || ':' || coalesce("
	    . "failure_code, '') || ':' || coalesce(claim_owner, '') FROM "
	    . "fleet_runs WHERE idempotency_key = '$key'");
	chomp $o;
	return $o;
};
ok(wait_for(sub { $state->('stale') eq 'failed:stale_claim:' }, 15,
    'recovery'), 'the stale running Run is settled failed/stale_claim');
ok(wait_for(sub { $state->('leaving') eq 'cancelled:cancelled:' }, 15,
    'settling recovery'), 'the stale settling Run is settled to its intent');
is($state->('fresh'), 'running::live-worker',
    'the fresh claim is untouched, owner and all');
ok($f->log_wait(qr/recovery: taking over run .* of session $s1/, 5),
    'the takeover is logged');
my (undef, $meta) = $f->psql("SELECT recovery_metadata_json->>'recovered_by' "
    . "FROM fleet_runs WHERE idempotency_key = 'stale'");
like($meta, qr/^recovery:[0-9a-f-]{36}$/, 'and recorded on the Run');

# The fresh claim goes stale once its heartbeat stops.
($rc) = $f->psql("UPDATE fleet_runs SET claim_heartbeat_at = now() - "
    . "interval '31 seconds' WHERE idempotency_key = 'fresh'");
ok(wait_for(sub { $state->('fresh') eq 'failed:stale_claim:' }, 15,
    'stale after 30 s'), 'and is recovered once older than stale_after');

($rc) = $f->stop;
is($rc, 0, 'stop');
done_testing;
