-- fleet schema, version 1.
--
-- Every invariant that more than one process or node must respect lives
-- here: one live Run per Session, one live or completed Run per
-- idempotency key, the shape of each Run status, per-Session turn
-- sequences.  Applied in one transaction by `fleet db migrate`.

CREATE TABLE fleet_workspaces (
	id		uuid PRIMARY KEY,
	name		varchar(255) NOT NULL DEFAULT 'default',
	created_at	timestamptz NOT NULL DEFAULT now()
);

-- The one local workspace; same id as fleet-rlm's
-- uuid5(NAMESPACE_URL, 'fleet-rlm/local-workspace').
INSERT INTO fleet_workspaces (id, name)
    VALUES ('7793d159-223b-5feb-a99c-f7696debb478', 'default');

CREATE TABLE fleet_sessions (
	id			uuid PRIMARY KEY,
	workspace_id		uuid NOT NULL
	    REFERENCES fleet_workspaces (id) ON DELETE CASCADE,
	status			varchar(32) NOT NULL DEFAULT 'active',
	title			varchar(255) NOT NULL DEFAULT 'New Session',
	checkpoint_version	integer NOT NULL DEFAULT 0,
	created_at		timestamptz NOT NULL DEFAULT now(),
	updated_at		timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT ck_fleet_sessions_status
	    CHECK (status IN ('active', 'archived')),
	CONSTRAINT ck_fleet_sessions_checkpoint
	    CHECK (checkpoint_version >= 0)
);
CREATE INDEX ix_fleet_sessions_workspace_updated
    ON fleet_sessions (workspace_id, updated_at);

CREATE TABLE fleet_runs (
	id				uuid PRIMARY KEY,
	session_id			uuid NOT NULL
	    REFERENCES fleet_sessions (id) ON DELETE CASCADE,
	status				varchar(32) NOT NULL,
	idempotency_key			varchar(128) NOT NULL,
	input_fingerprint		varchar(64) NOT NULL,
	base_checkpoint_version		integer NOT NULL,
	commit_checkpoint_version	integer,
	claim_owner			varchar(128),
	claim_heartbeat_at		timestamptz,
	cancel_requested_at		timestamptz,
	failure_code			varchar(64),
	failure_public_message		text,
	failure_usage_json		jsonb,
	terminal_intent			varchar(32),
	recovery_metadata_json		jsonb,
	created_at			timestamptz NOT NULL DEFAULT now(),
	finished_at			timestamptz,
	CONSTRAINT ck_fleet_runs_status CHECK (status IN
	    ('running', 'settling', 'completed', 'failed', 'cancelled',
	    'timeout')),
	CONSTRAINT ck_fleet_runs_fingerprint
	    CHECK (input_fingerprint ~ '^[0-9a-f]{64}$'),
	CONSTRAINT ck_fleet_runs_idempotency_key
	    CHECK (length(idempotency_key) >= 1),
	CONSTRAINT ck_fleet_runs_terminal_intent CHECK (terminal_intent IS NULL
	    OR terminal_intent IN ('failed', 'cancelled', 'timeout')),
	-- running: claimed, nothing settled; settling: still claimed, with
	-- the failure it will settle to; completed: committed, no claim;
	-- failed/cancelled/timeout: no claim, no commit, a failure code.
	CONSTRAINT ck_fleet_runs_terminal_shape CHECK (
	    (status = 'running' AND claim_owner IS NOT NULL
	    AND claim_heartbeat_at IS NOT NULL
	    AND commit_checkpoint_version IS NULL AND failure_code IS NULL
	    AND terminal_intent IS NULL)
	    OR (status = 'settling' AND claim_owner IS NOT NULL
	    AND claim_heartbeat_at IS NOT NULL
	    AND commit_checkpoint_version IS NULL
	    AND failure_code IS NOT NULL AND terminal_intent IS NOT NULL)
	    OR (status = 'completed' AND claim_owner IS NULL
	    AND commit_checkpoint_version IS NOT NULL AND failure_code IS NULL
	    AND finished_at IS NOT NULL)
	    OR (status IN ('failed', 'cancelled', 'timeout')
	    AND claim_owner IS NULL AND commit_checkpoint_version IS NULL
	    AND failure_code IS NOT NULL AND finished_at IS NOT NULL)),
	CONSTRAINT uq_fleet_runs_id_session UNIQUE (id, session_id)
);
CREATE INDEX ix_fleet_runs_session_created
    ON fleet_runs (session_id, created_at);
-- A key names one live or completed Run; failed attempts free it.
CREATE UNIQUE INDEX uq_fleet_runs_live_idempotency
    ON fleet_runs (session_id, idempotency_key)
    WHERE status IN ('running', 'settling', 'completed');
-- One Turn at a time per Session, across every process and node.
CREATE UNIQUE INDEX uq_fleet_runs_one_running
    ON fleet_runs (session_id) WHERE status IN ('running', 'settling');
CREATE INDEX ix_fleet_runs_recovery_scan
    ON fleet_runs (status, claim_heartbeat_at);

CREATE TABLE fleet_turns (
	id			uuid PRIMARY KEY,
	session_id		uuid NOT NULL
	    REFERENCES fleet_sessions (id) ON DELETE CASCADE,
	run_id			uuid NOT NULL,
	sequence		integer NOT NULL,
	role			varchar(32) NOT NULL,
	user_input_json		jsonb,
	committed_turn_json	jsonb,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT ck_fleet_turns_sequence CHECK (sequence > 0),
	CONSTRAINT ck_fleet_turns_role_shape CHECK (
	    (role = 'user' AND user_input_json IS NOT NULL
	    AND committed_turn_json IS NULL)
	    OR (role = 'assistant' AND committed_turn_json IS NOT NULL
	    AND user_input_json IS NULL)),
	CONSTRAINT uq_fleet_turns_session_sequence
	    UNIQUE (session_id, sequence),
	CONSTRAINT uq_fleet_turns_run_role UNIQUE (run_id, role),
	CONSTRAINT fk_fleet_turns_run_session FOREIGN KEY (run_id, session_id)
	    REFERENCES fleet_runs (id, session_id) ON DELETE CASCADE
);

-- Bytes live in the row, with their digest; their size is bounded by
-- max_upload_bytes and max_artifact_bytes, and here by a hard ceiling.
CREATE TABLE fleet_attachments (
	id		uuid PRIMARY KEY,
	workspace_id	uuid NOT NULL
	    REFERENCES fleet_workspaces (id) ON DELETE CASCADE,
	filename	varchar(512) NOT NULL,
	content_type	varchar(255),
	byte_size	bigint NOT NULL,
	checksum_sha256	char(64) NOT NULL,
	content		bytea NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT ck_fleet_attachments_size CHECK (byte_size >= 0
	    AND byte_size <= 1073741824 AND octet_length(content) = byte_size),
	CONSTRAINT ck_fleet_attachments_sha256
	    CHECK (checksum_sha256 ~ '^[0-9a-f]{64}$'),
	CONSTRAINT ck_fleet_attachments_filename
	    CHECK (length(filename) >= 1)
);

CREATE TABLE fleet_artifacts (
	id		uuid PRIMARY KEY,
	workspace_id	uuid NOT NULL
	    REFERENCES fleet_workspaces (id) ON DELETE CASCADE,
	session_id	uuid NOT NULL
	    REFERENCES fleet_sessions (id) ON DELETE CASCADE,
	run_id		uuid NOT NULL
	    REFERENCES fleet_runs (id) ON DELETE CASCADE,
	kind		varchar(64) NOT NULL,
	title		varchar(512),
	media_type	varchar(255) NOT NULL,
	byte_size	bigint NOT NULL,
	checksum_sha256	char(64) NOT NULL,
	content		bytea NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT ck_fleet_artifacts_kind
	    CHECK (kind IN ('text', 'markdown', 'json')),
	CONSTRAINT ck_fleet_artifacts_size CHECK (byte_size >= 0
	    AND byte_size <= 1073741824 AND octet_length(content) = byte_size),
	CONSTRAINT ck_fleet_artifacts_sha256
	    CHECK (checksum_sha256 ~ '^[0-9a-f]{64}$')
);
CREATE INDEX ix_fleet_artifacts_run ON fleet_artifacts (run_id);

-- Every sandbox a lease manager creates is recorded before it is used,
-- so that none can be orphaned silently: a row outlives a crash and the
-- next incarnation of that node destroys what it names.
CREATE TABLE fleet_sandboxes (
	id		uuid PRIMARY KEY,
	node_id		uuid NOT NULL,
	backend		varchar(32) NOT NULL,
	state		varchar(32) NOT NULL,
	provider_ref	varchar(255),
	workspace_id	uuid,
	run_id		uuid,
	created_at	timestamptz NOT NULL DEFAULT now(),
	leased_at	timestamptz,
	expires_at	timestamptz,
	CONSTRAINT ck_fleet_sandboxes_backend
	    CHECK (backend IN ('local', 'daytona')),
	CONSTRAINT ck_fleet_sandboxes_state
	    CHECK (state IN ('creating', 'warm', 'leased', 'destroying')),
	CONSTRAINT ck_fleet_sandboxes_leased CHECK (state <> 'leased'
	    OR (leased_at IS NOT NULL AND expires_at IS NOT NULL))
);
CREATE INDEX ix_fleet_sandboxes_node ON fleet_sandboxes (node_id);
CREATE INDEX ix_fleet_sandboxes_run ON fleet_sandboxes (run_id);
