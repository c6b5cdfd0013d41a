/*
 * One Turn in a worker.  Claim the Run (replaying a completed key, or
 * failing open), prepare (attachments staged into the workspace volume,
 * a sandbox leased), run the RLM, then commit in one transaction and
 * send the committed suffix; or settle the Run as failed, cancelled or
 * timed out.  Each outcome ends the stream the way fleet-rlm's does.
 */
#include <sys/types.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <sha2.h>
#include <uuid.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "lib/util.h"
#include "lib/utf8.h"
#include "chunks.h"
#include "lease.h"
#include "lm.h"
#include "rlm.h"
#include "turnworker.h"

#define WORKSPACE_ID		"7793d159-223b-5feb-a99c-f7696debb478"
#define LEASE_DEADLINE_MS	(5 * 60 * 1000)

struct child_run;

struct turn {
	int64_t			 id;
	char			 session[40];
	char			 key[130];
	char			 run[40];
	char			 owner[128];
	json_t			*request;
	int			 base_checkpoint;
	int64_t			 start_ms;
	int64_t			 start_us;
	char			 created_at[64];
	struct lease_client	*lease;
	struct rlm		*rlm;
	json_t			*parts;
	struct event		*ev_heartbeat;
	struct event		*ev_deadline;
	int			 claimed;
	int			 started;	/* `start' sent */
	int			 ended;
	struct child_run	*children;
};

struct child_run {
	struct child_run	*next;
	struct turn		*t;
	int64_t			 token;
	char			 id[48];
	char			 label[241];
	int64_t			 start_ms;
	json_t			*context;
	struct lease_client	*lease;
	struct rlm		*rlm;
};

static void	turn_end(struct turn *, const char *);
static void	turn_fail(struct turn *, const char *, const char *, int,
		    const char *);

static void
emit(json_t *chunk, void *arg)
{
	struct turn	*t = arg;
	struct msg	 m;
	char		*s;

	if ((s = json_dumps(chunk, JSON_COMPACT)) == NULL)
		fatalx("%s: json_dumps", __func__);
	json_decref(chunk);
	proto_msg_init(&m, MSG_CHUNK);
	m.chunk.turn = t->id;
	m.chunk.json = s;
	tw_send(&m);
	free(s);
}

static void
record(json_t *part, void *arg)
{
	struct turn	*t = arg;

	json_array_append_new(t->parts, part);
}

static void
iso_now(char *buf, size_t len)
{
	struct timespec	 ts;
	struct tm	 tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/*
 * The input fingerprint: SHA-256 of the canonical input (text, ordered
 * attachment ids, skill selections), versioned, as 64 hex digits.
 */
static void
fingerprint(json_t *request, char out[SHA256_DIGEST_STRING_LENGTH])
{
	json_t	*c;
	char	*s;

	c = json_pack("{s:i, s:O, s:O, s:[]}", "v", 1, "text",
	    json_object_get(request, "text"), "attachment_ids",
	    json_object_get(request, "attachment_ids"), "skill_selections");
	s = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
	SHA256Data((const uint8_t *)s, strlen(s), out);
	free(s);
	json_decref(c);
}

static void
subrlm_free(struct child_run *c)
{
	rlm_free(c->rlm);
	lease_release(c->lease);
	json_decref(c->context);
	free(c);
}

static void
turn_free(struct turn *t)
{
	struct child_run	*c;

	while ((c = t->children) != NULL) {
		t->children = c->next;
		subrlm_free(c);
	}
	rlm_free(t->rlm);
	lease_release(t->lease);
	if (t->ev_heartbeat != NULL)
		event_free(t->ev_heartbeat);
	if (t->ev_deadline != NULL)
		event_free(t->ev_deadline);
	json_decref(t->request);
	json_decref(t->parts);
	free(t);
}

/* The stream is over: tell the gateway, free everything (lease too). */
static void
turn_end(struct turn *t, const char *outcome)
{
	struct msg	 m;

	if (t->ended)
		return;
	t->ended = 1;
	proto_msg_init(&m, MSG_TURN_END);
	m.turn_end.turn = t->id;
	m.turn_end.outcome = (char *)outcome;
	tw_send(&m);
	log_info("turn %lld (run %s): %s in %lld ms", (long long)t->id,
	    t->run[0] ? t->run : "-", outcome,
	    (long long)(now_ms() - t->start_ms));
	tw->turn = NULL;
	turn_free(t);
	tw_turn_ended();
}

/* error + finish(error): for a failure before or after `start'. */
static void
stream_error(struct turn *t, const char *message)
{
	emit(chunk_error(message), t);
	emit(chunk_finish("error", NULL), t);
}

/*
 * A Run that will not commit: settle it (unless the claim was never
 * ours) and end the stream with its closed message.
 */
static void
turn_fail(struct turn *t, const char *status, const char *code, int cancelled,
    const char *message)
{
	struct db_err	 e;

	if (t->ended)
		return;
	if (t->claimed && store_settle(tw->db, t->run, t->owner, status, code,
	    message, &e) == -1)
		log_warnx("run %s: settle %s: %s", t->run, status, e.msg);
	t->claimed = 0;
	if (cancelled)
		emit(chunk_abort("Turn cancelled"), t);
	else
		stream_error(t, message);
	turn_end(t, status);
}

static json_t *
usage_json(struct turn *t)
{
	struct lm_usage	 u = rlm_usage(t->rlm);
	int64_t		 exec_us, lm_us;

	rlm_times(t->rlm, &exec_us, &lm_us);
	return json_pack("{s:i, s:f, s:f, s:f, s:{s:I, s:I, s:I, s:i, s:i}}",
	    "iterations", rlm_iterations(t->rlm),
	    "duration_ms", (now_us() - t->start_us) / 1000.0,
	    "execution_ms", exec_us / 1000.0,
	    "lm_ms", lm_us / 1000.0,
	    "observed_lm_usage",
	    "prompt_tokens", (json_int_t)u.prompt_tokens,
	    "completion_tokens", (json_int_t)u.completion_tokens,
	    "total_tokens", (json_int_t)u.total_tokens,
	    "lm_calls", rlm_lm_calls(t->rlm),
	    "sub_lm_calls", rlm_sub_calls(t->rlm));
}

/* The Turn Commit, then the committed suffix and finish(stop). */
static void
turn_commit(struct turn *t, const char *answer)
{
	struct commit	 c;
	struct db_err	 e;
	json_t		*suffix, *committed, *meta;
	char		*user_json, *committed_json;

	suffix = json_pack("[{s:s, s:o}, {s:s, s:s}]", "type", "usage",
	    "usage", usage_json(t), "type", "text", "text", answer);
	committed = json_pack("{s:i, s:O}", "schema_version", 1, "parts",
	    t->parts);
	json_array_extend(json_object_get(committed, "parts"), suffix);
	committed_json = json_dumps(committed, JSON_COMPACT);
	user_json = json_dumps(t->request, JSON_COMPACT);
	json_decref(committed);

	memset(&c, 0, sizeof(c));
	c.run_id = t->run;
	c.session_id = t->session;
	c.owner = t->owner;
	c.base_checkpoint = t->base_checkpoint;
	c.user_input_json = user_json;
	c.committed_json = committed_json;
	if (store_commit(tw->db, &c, &e) == -1) {
		log_warnx("run %s: commit: %s", t->run, e.msg);
		free(user_json);
		free(committed_json);
		json_decref(suffix);
		turn_fail(t, "failed", "commit_failed", 0,
		    "Turn could not be committed");
		return;
	}
	t->claimed = 0;
	free(user_json);
	free(committed_json);
	chunks_project(suffix, t->run, emit, t);
	json_decref(suffix);
	meta = json_pack("{s:i, s:s, s:s, s:i, s:I, s:b}", "schemaVersion", 1,
	    "runId", t->run, "sessionId", t->session, "checkpointVersion",
	    c.checkpoint, "durationMs", (json_int_t)(now_ms() - t->start_ms),
	    "idempotentReplay", 0);
	emit(chunk_finish("stop", meta), t);
	turn_end(t, "completed");
}

static void
rlm_done(struct rlm *r, const struct rlm_outcome *o, void *arg)
{
	struct turn	*t = arg;

	(void)r;
	if (o->ok) {
		turn_commit(t, o->answer);
		return;
	}
	log_warnx("run %s failed: %s (%s)", t->run, o->message,
	    o->detail ? o->detail : "-");
	turn_fail(t, "failed", o->code, 0, o->message);
}

static void	subrlm_start(struct rlm *, int64_t, const char *, json_t *,
		    void *);

static const struct rlm_ops root_ops = { emit, record, rlm_done,
	subrlm_start };

static struct rlm_params
params(int child)
{
	const struct fleet_config	*c = tw->env->conf;
	struct rlm_params		 p;

	memset(&p, 0, sizeof(p));
	p.root_model = c->root_model;
	p.sub_model = c->sub_model;
	p.root_max_tokens = c->root_max_tokens;
	p.sub_max_tokens = c->sub_max_tokens;
	p.max_iters = child ? c->recursion_child_max_iters : c->max_iters;
	p.max_llm_calls = child ? c->recursion_child_max_llm_calls :
	    c->max_llm_calls;
	p.max_output_chars = child ? c->recursion_child_max_output_chars :
	    c->max_output_chars;
	p.max_execution_output_bytes = c->max_execution_output_bytes;
	p.execution_timeout = c->execution_timeout;
	p.depth = child ? 1 : 0;
	p.recursion = c->recursion_enabled;
	p.recursion_max_calls = c->recursion_max_calls;
	return p;
}

/* data-child-progress for a child RLM, live and committed. */
static void
child_progress(struct child_run *c, const char *state, const char *outcome)
{
	json_t	*d;

	d = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s}", "child_id", c->id,
	    "task_label", c->label, "state", state, "elapsed_ms",
	    (json_int_t)(now_ms() - c->start_ms), "cleanup_state",
	    strcmp(state, "running") == 0 ? "pending" : "complete",
	    "parent_run_id", c->t->run);
	if (d == NULL) {
		log_warnx("run %s: %s: cannot encode its progress", c->t->run,
		    c->id);
		return;
	}
	if (outcome != NULL) {
		char o[501];

		utf8_strlcpy(o, outcome, sizeof(o));
		json_object_set_new(d, "outcome", json_string(o));
	}
	record(json_pack("{s:s, s:O}", "type", "child_progress", "data", d),
	    c->t);
	emit(chunk_data("data-child-progress", NULL, d), c->t);
}

static void
child_unlink(struct child_run *c)
{
	struct child_run	**pp;

	for (pp = &c->t->children; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
}

static void
child_done(struct rlm *r, const struct rlm_outcome *o, void *arg)
{
	struct child_run	*c = arg;
	struct turn		*t = c->t;
	struct lm_usage		 u = rlm_usage(r);

	rlm_add_usage(t->rlm, &u, rlm_lm_calls(r));
	child_progress(c, o->ok ? "completed" : "failed",
	    o->ok ? o->answer : o->message);
	rlm_child_answer(t->rlm, c->token, o->ok ? o->answer : NULL,
	    o->ok ? NULL : "the child RLM failed");
	child_unlink(c);
	/* Its lease goes now: the child's sandbox is destroyed. */
	c->rlm = NULL;
	rlm_free(r);
	subrlm_free(c);
}

static const struct rlm_ops child_ops = { NULL, NULL, child_done, NULL };

static void
child_granted(struct lease_client *lc, int kin, int kout, int64_t boot_ms,
    void *arg)
{
	struct child_run	*c = arg;
	struct rlm_params	 p = params(1);
	json_t			*vars;

	(void)lc;
	(void)boot_ms;
	vars = json_pack("{s:s, s:O, s:[]}", "query", c->label, "context",
	    c->context, "attachments");
	c->rlm = rlm_new(tw->base, tw->lm, tw->lm_sub, kin, kout, &p, c->id, vars,
	    &child_ops, c);
	json_decref(vars);
	rlm_start(c->rlm);
}

static void
child_refused(struct lease_client *lc, const char *code, const char *message,
    void *arg)
{
	struct child_run	*c = arg;
	struct turn		*t = c->t;

	(void)lc;
	log_warnx("run %s: child sandbox refused (%s): %s", t->run, code,
	    message);
	child_progress(c, "failed", "no sandbox for the child");
	rlm_child_answer(t->rlm, c->token, NULL, "no sandbox is available "
	    "for a child RLM");
	child_unlink(c);
	subrlm_free(c);
}

static void
child_lost(struct lease_client *lc, void *arg)
{
	child_refused(lc, "lost", "lease lost", arg);
}

static const struct lease_ops child_lease_ops = { child_granted,
	child_refused, child_lost };

/* rlm_query from the root: a child RLM in its own volume-less sandbox. */
static void
subrlm_start(struct rlm *r, int64_t token, const char *task, json_t *context,
    void *arg)
{
	struct turn		*t = arg;
	struct child_run	*c;
	static int		 seq;

	(void)r;
	c = xcalloc(1, sizeof(*c));
	c->t = t;
	c->token = token;
	c->start_ms = now_ms();
	snprintf(c->id, sizeof(c->id), "child-%d", ++seq);
	utf8_strlcpy(c->label, task, sizeof(c->label));
	c->context = context != NULL && !json_is_null(context) ?
	    json_incref(context) : json_string("");
	if (!json_is_string(c->context)) {
		char *s = json_dumps(c->context, JSON_COMPACT | JSON_ENCODE_ANY);

		json_decref(c->context);
		c->context = json_string(s);
		free(s);
	}
	c->next = t->children;
	t->children = c;
	child_progress(c, "running", NULL);
	c->lease = lease_acquire(tw->base, tw->env->rundir, "", t->run,
	    LEASE_DEADLINE_MS, &child_lease_ops, c);
}

static void
granted(struct lease_client *lc, int kin, int kout, int64_t boot_ms, void *arg)
{
	struct turn		*t = arg;
	struct rlm_params	 p = params(0);
	json_t			*vars = json_object_get(t->request, "_vars");

	(void)lc;
	log_debug("run %s: sandbox ready (booted in %lld ms)", t->run,
	    (long long)boot_ms);
	emit(chunk_start(t->run, t->session, t->created_at, "live"), t);
	t->started = 1;
	t->rlm = rlm_new(tw->base, tw->lm, tw->lm_sub, kin, kout, &p, t->run, vars,
	    &root_ops, t);
	json_object_del(t->request, "_vars");
	rlm_start(t->rlm);
}

static void
refused(struct lease_client *lc, const char *code, const char *message,
    void *arg)
{
	struct turn	*t = arg;

	(void)lc;
	log_warnx("run %s: no sandbox (%s): %s", t->run, code, message);
	turn_fail(t, "failed", "preparation_failed", 0,
	    strcmp(code, "deadline") == 0 ? "Turn preparation timed out" :
	    "Turn could not be prepared");
}

static void
lost(struct lease_client *lc, void *arg)
{
	struct turn	*t = arg;

	(void)lc;
	turn_fail(t, "failed", "execution_failed", 0, "Turn failed");
}

static const struct lease_ops lease_ops = { granted, refused, lost };

/* A name that is safe as one path component. */
static void
safe_name(const char *in, char *out, size_t len)
{
	size_t	 i, j = 0;

	for (i = 0; in[i] != '\0' && j + 1 < len; i++)
		out[j++] = (in[i] == '/' || (unsigned char)in[i] < 0x20) ?
		    '_' : in[i];
	out[j] = '\0';
	if (j == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
		strlcpy(out, "attachment", len);
}

/*
 * The volume is the sandboxes' to write: anything in it may be a symlink
 * planted by an earlier Turn's code.  So every step is taken relative to
 * a directory already opened, never following a link, and the file is
 * written under a fresh name and renamed into place.
 */
static int
subdir(int dfd, const char *name)
{
	if (mkdirat(dfd, name, 0755) == -1 && errno != EEXIST)
		return -1;
	return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
}

static int
stage_file(const char *volume, const char *id, const char *name,
    const unsigned char *data, size_t len)
{
	char	 tmp[64];
	int	 vfd, afd = -1, dfd = -1, fd = -1, rc = -1, i, saved;
	size_t	 off = 0;
	ssize_t	 n;

	if ((vfd = open(volume, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) == -1 || (afd = subdir(vfd, "attachments")) == -1 ||
	    (dfd = subdir(afd, id)) == -1)
		goto out;
	for (i = 0; i < 8 && fd == -1; i++) {
		snprintf(tmp, sizeof(tmp), ".staging-%08x", arc4random());
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC, 0644);
		if (fd == -1 && errno != EEXIST)
			goto out;
	}
	if (fd == -1)
		goto out;
	while (off < len) {
		if ((n = write(fd, data + off, len - off)) == -1) {
			if (errno == EINTR)
				continue;
			goto out;
		}
		off += n;
	}
	if (close(fd) == -1) {
		fd = -1;
		goto out;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, name) == -1) {
		unlinkat(dfd, tmp, 0);
		goto out;
	}
	rc = 0;
out:
	saved = errno;
	if (fd != -1) {
		close(fd);
		unlinkat(dfd, tmp, 0);
	}
	if (dfd != -1)
		close(dfd);
	if (afd != -1)
		close(afd);
	if (vfd != -1)
		close(vfd);
	errno = saved;
	return rc;
}

/* Text for context: UTF-8 that JSON can carry (NULs included). */
static int
textual(const unsigned char *s, size_t len)
{
	json_t	*j = json_stringn((const char *)s, len);

	json_decref(j);
	return j != NULL;
}

/*
 * Stage the Turn's attachments into the workspace volume and make the
 * input variables: query, context (the attachments' text, or the Turn
 * text when there are none) and attachments.
 */
static int
stage(struct turn *t, char *why, size_t whylen)
{
	json_t		*ids = json_object_get(t->request, "attachment_ids");
	json_t		*list = json_array(), *id;
	const char	*text = json_string_value(json_object_get(t->request,
			    "text"));
	struct db_err	 e;
	PGresult	*res;
	unsigned char	*bytes;
	char		*dir, *c, name[256], sandbox_path[512];
	const char	*p[1];
	size_t		 i, len;
	struct evbuffer	*ctx = evbuffer_new();
	int		 ntext = 0;

	json_array_foreach(ids, i, id) {
		p[0] = json_string_value(id);
		res = db_sql(tw->db, "SELECT filename, byte_size, "
		    "checksum_sha256, content FROM fleet_attachments WHERE "
		    "id = $1 AND workspace_id = '" WORKSPACE_ID "'", 1, p, &e);
		if (res == NULL || PQntuples(res) == 0) {
			snprintf(why, whylen, "attachment %s: %s", p[0],
			    res ? "not found" : e.msg);
			PQclear(res);
			goto fail;
		}
		bytes = PQunescapeBytea((const unsigned char *)PQgetvalue(res,
		    0, 3), &len);
		safe_name(PQgetvalue(res, 0, 0), name, sizeof(name));
		xasprintf(&dir, "%s/volumes/%s", tw->env->statedir,
		    WORKSPACE_ID);
		if (bytes == NULL ||
		    stage_file(dir, p[0], name, bytes, len) == -1) {
			snprintf(why, whylen, "staging %s into %s: %s", name,
			    dir, strerror(errno));
			PQfreemem(bytes);
			PQclear(res);
			free(dir);
			goto fail;
		}
		snprintf(sandbox_path, sizeof(sandbox_path),
		    "/workspace/attachments/%s/%s", p[0], name);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:I, "
		    "s:s}", "id", p[0], "name", PQgetvalue(res, 0, 0), "path",
		    sandbox_path, "size", (json_int_t)len, "sha256",
		    PQgetvalue(res, 0, 2)));
		if (textual(bytes, len)) {
			if (json_array_size(ids) > 1)
				evbuffer_add_printf(ctx, "%s=== %s ===\n",
				    ntext ? "\n" : "", name);
			evbuffer_add(ctx, bytes, len);
			ntext++;
		}
		PQfreemem(bytes);
		PQclear(res);
		free(dir);
	}
	if (ntext == 0)
		evbuffer_add(ctx, text, strlen(text));
	len = evbuffer_get_length(ctx);
	c = buf_take(ctx);
	evbuffer_free(ctx);
	json_object_set_new(t->request, "_vars", json_pack("{s:s, s:s%, s:o}",
	    "query", text, "context", c, len, "attachments", list));
	free(c);
	return 0;
fail:
	json_decref(list);
	evbuffer_free(ctx);
	return -1;
}

static void
heartbeat(evutil_socket_t fd, short events, void *arg)
{
	struct turn	*t = arg;
	struct db_err	 e;
	int		 cancel;

	(void)fd;
	(void)events;
	if (store_heartbeat(tw->db, t->run, t->owner, &cancel, &e) == -1) {
		if (e.lost || e.sqlstate[0] != '\0') {
			/* The database blinked; the next beat may do. */
			log_warnx("run %s: heartbeat: %s", t->run, e.msg);
			goto again;
		}
		log_warnx("run %s: claim lost; abandoning the Turn", t->run);
		t->claimed = 0;
		turn_fail(t, "failed", "execution_failed", 0, "Turn failed");
		return;
	}
	if (cancel) {
		log_info("run %s: cancellation requested", t->run);
		turn_fail(t, "cancelled", "cancelled", 1, "Turn cancelled");
		return;
	}
again:
	timer_add_ms(t->ev_heartbeat,
	    (int64_t)tw->env->conf->heartbeat_seconds * 1000);
}

static void
deadline(evutil_socket_t fd, short events, void *arg)
{
	struct turn	*t = arg;

	(void)fd;
	(void)events;
	log_warnx("run %s: turn_timeout (%d s) reached", t->run,
	    tw->env->conf->turn_timeout);
	turn_fail(t, "timeout", "timeout", 0, "Turn timed out");
}

/* An idempotent replay: the committed Turn, projected again. */
static void
replay(struct turn *t)
{
	struct db_err	 e;
	PGresult	*res;
	const char	*p[1] = { t->run };
	json_t		*committed, *meta, *status;
	json_error_t	 jerr;

	res = db_sql(tw->db, "SELECT t.committed_turn_json, "
	    "r.commit_checkpoint_version, to_char(r.created_at AT TIME ZONE "
	    "'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') FROM fleet_turns t "
	    "JOIN fleet_runs r ON r.id = t.run_id WHERE t.run_id = $1 AND "
	    "t.role = 'assistant'", 1, p, &e);
	if (res == NULL || PQntuples(res) == 0 || (committed = json_loads(
	    PQgetvalue(res, 0, 0), 0, &jerr)) == NULL) {
		log_warnx("run %s: replay: %s", t->run, res ? "no committed "
		    "turn" : e.msg);
		PQclear(res);
		stream_error(t, "Turn is unavailable");
		turn_end(t, "failed");
		return;
	}
	emit(chunk_start(t->run, t->session, PQgetvalue(res, 0, 2), "replay"),
	    t);
	status = chunk_data("data-status", NULL, json_pack("{s:s, s:s, s:s}",
	    "phase", "replay", "status", "running", "message",
	    "idempotent replay"));
	json_object_set_new(status, "transient", json_true());
	emit(status, t);
	chunks_project(json_object_get(committed, "parts"), t->run, emit, t);
	meta = json_pack("{s:i, s:s, s:s, s:i, s:b}", "schemaVersion", 1,
	    "runId", t->run, "sessionId", t->session, "checkpointVersion",
	    atoi(PQgetvalue(res, 0, 1)), "idempotentReplay", 1);
	emit(chunk_finish("stop", meta), t);
	json_decref(committed);
	PQclear(res);
	turn_end(t, "completed");
}

void
turn_begin(struct msg_turn *m)
{
	struct turn		*t;
	struct claim		 c;
	struct db_err		 e;
	enum claim_result	 r;
	json_error_t		 jerr;
	struct msg		 sm;
	char			 fp[SHA256_DIGEST_STRING_LENGTH], why[1024];
	char			 uuid[40];
	uuid_t			 u;

	t = xcalloc(1, sizeof(*t));
	t->id = m->turn;
	t->start_ms = now_ms();
	t->start_us = now_us();
	iso_now(t->created_at, sizeof(t->created_at));
	strlcpy(t->session, m->session, sizeof(t->session));
	strlcpy(t->key, m->idempotency_key, sizeof(t->key));
	t->parts = json_array();
	tw->turn = t;
	if ((t->request = json_loads(m->request, 0, &jerr)) == NULL ||
	    !json_is_string(json_object_get(t->request, "text")) ||
	    !json_is_array(json_object_get(t->request, "attachment_ids"))) {
		json_decref(t->request);
		t->request = NULL;
		stream_error(t, "Invalid request");
		turn_end(t, "failed");
		return;
	}
	if (tw->stopping) {
		stream_error(t, "Turn is unavailable");
		turn_end(t, "failed");
		return;
	}
	uuid_generate(u);
	uuid_unparse_lower(u, uuid);
	snprintf(t->owner, sizeof(t->owner), "worker:%.36s:%d:%s",
	    tw->env->node_id, tw->env->instance, uuid);
	fingerprint(t->request, fp);

	memset(&c, 0, sizeof(c));
	c.session_id = t->session;
	c.idempotency_key = t->key;
	c.fingerprint = fp;
	c.owner = t->owner;
	r = store_claim(tw->db, &c, &e);
	strlcpy(t->run, c.run_id, sizeof(t->run));
	switch (r) {
	case CLAIM_OK:
		break;
	case CLAIM_REPLAY:
		replay(t);
		return;
	case CLAIM_ERROR:
		log_warnx("turn %lld: claim: %s", (long long)t->id, e.msg);
		/* FALLTHROUGH */
	case CLAIM_NO_SESSION:
	case CLAIM_BUSY:
	case CLAIM_MISMATCH:
		stream_error(t, store_claim_message(r));
		turn_end(t, "failed");
		return;
	}
	t->claimed = 1;
	t->base_checkpoint = c.base_checkpoint;
	proto_msg_init(&sm, MSG_TURN_STARTED);
	sm.turn_started.turn = t->id;
	sm.turn_started.run = t->run;
	sm.turn_started.owner = t->owner;
	tw_send(&sm);
	log_info("turn %lld: run %s claimed in session %s", (long long)t->id,
	    t->run, t->session);

	t->ev_heartbeat = evtimer_new(tw->base, heartbeat, t);
	t->ev_deadline = evtimer_new(tw->base, deadline, t);
	if (t->ev_heartbeat == NULL || t->ev_deadline == NULL)
		fatalx("%s: evtimer_new", __func__);
	timer_add_ms(t->ev_heartbeat,
	    (int64_t)tw->env->conf->heartbeat_seconds * 1000);
	timer_add_ms(t->ev_deadline,
	    (int64_t)tw->env->conf->turn_timeout * 1000);

	if (tw->lm == NULL) {
		log_warnx("run %s: %s", t->run, tw->lm_error);
		turn_fail(t, "failed", "preparation_failed", 0,
		    "Turn could not be prepared");
		return;
	}
	if (stage(t, why, sizeof(why)) == -1) {
		log_warnx("run %s: %s", t->run, why);
		turn_fail(t, "failed", "preparation_failed", 0,
		    "Turn could not be prepared");
		return;
	}
	t->lease = lease_acquire(tw->base, tw->env->rundir, WORKSPACE_ID,
	    t->run, LEASE_DEADLINE_MS, &lease_ops, t);
}

/* The gateway asks: the client went away, or a cancellation came. */
void
turn_cancel(int64_t id)
{
	struct turn	*t = tw->turn;

	if (t == NULL || t->id != id)
		return;
	log_info("turn %lld (run %s): cancelled", (long long)id,
	    t->run[0] ? t->run : "-");
	turn_fail(t, "cancelled", "cancelled", 1, "Turn cancelled");
}

/* The gateway went away: nobody reads this stream any more. */
void
turn_abandon(void)
{
	if (tw->turn != NULL)
		turn_cancel(tw->turn->id);
}
