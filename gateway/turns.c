/*
 * POST /api/sessions/{id}/turns: the Turn stream.
 *
 * The request is validated, then the SSE headers go out at once with
 * the transient preparation prelude, repeated until a worker has
 * claimed and prepared the Run.  The Turn goes to an idle turnworker or
 * waits in a bounded queue; the worker's chunks are relayed as they
 * come.  A client that goes away cancels the Run; a worker that dies
 * mid-Turn ends the stream at once with an error, and its Run is
 * settled here.
 */
#include <sys/types.h>
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <uuid.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "lib/util.h"
#include "lib/utf8.h"
#include "proto/chan.h"
#include "gateway.h"

#define TEXT_MAX		100000
#define ATTACHMENTS_MAX		16
#define CLIENT_BUFFER_MAX	(16 * 1024 * 1024)
#define CLIENT_READ_MAX		(64 * 1024)
#define PRELUDE	"{\"type\":\"data-status\",\"data\":{\"phase\":\"preparation\"," \
		"\"status\":\"running\",\"message\":null},\"transient\":true}"

struct gwturn {
	TAILQ_ENTRY(gwturn)	 entry;
	int64_t			 id;
	struct evhttp_request	*req;		/* NULL once the client left */
	struct evhttp_connection *evcon;
	char			 session[40];
	char			*key;
	char			*request;
	struct worker		*worker;
	char			 run[40];
	char			*owner;
	int			 queued;
	int			 started;	/* `start' relayed */
	int			 slow;		/* the client stopped reading */
	struct event		*ev_beat;
};
TAILQ_HEAD(gwturnlist, gwturn);

static struct gwturnlist	 queue;
static struct gwturnlist	 active;
static int			 nqueued;
static int			 nactive;
static int64_t			 next_id;

static void	turn_free(struct gwturn *);
static void	turn_assign(struct gwturn *, struct worker *);

void
turns_init(void)
{
	TAILQ_INIT(&queue);
	TAILQ_INIT(&active);
}

int
turns_active(void)
{
	return nactive;
}

int
turns_queued(void)
{
	return nqueued;
}

static void
send_raw(struct gwturn *t, const char *s, size_t len)
{
	struct evbuffer	*b;
	struct bufferevent *bev;

	if (t->req == NULL)
		return;
	bev = evhttp_connection_get_bufferevent(t->evcon);
	if (t->slow)
		return;
	if (bev != NULL && evbuffer_get_length(bufferevent_get_output(bev)) >
	    CLIENT_BUFFER_MAX) {
		/* Dropped from the loop, never from inside a caller. */
		log_warnx("turn %lld: the client is not reading; dropping "
		    "it", (long long)t->id);
		t->slow = 1;
		timer_add_ms(t->ev_beat, 0);
		return;
	}
	if ((b = evbuffer_new()) == NULL)
		fatalx("%s: evbuffer_new", __func__);
	evbuffer_add(b, s, len);
	evhttp_send_reply_chunk(t->req, b);
	evbuffer_free(b);
}

/* One SSE event: data: <json>\n\n. */
static void
send_event(struct gwturn *t, const char *json)
{
	char	*s;
	int	 n;

	n = xasprintf(&s, "data: %s\n\n", json);
	send_raw(t, s, n);
	free(s);
}

static void
stats_changed(void)
{
	gateway_stats();
}

/*
 * While the stream runs evhttp keeps reading the socket into a buffer
 * nobody drains; the watermark stops reading at CLIENT_READ_MAX so a
 * client cannot grow it.  Writes still notice a closed socket.
 */
static void
client_read_limit(struct gwturn *t, size_t max)
{
	struct bufferevent *bev;

	if ((bev = evhttp_connection_get_bufferevent(t->evcon)) != NULL)
		bufferevent_setwatermark(bev, EV_READ, 0, max);
}

/* Close the response with [DONE]; the Turn is over for the client. */
static void
finish_stream(struct gwturn *t)
{
	if (t->req == NULL)
		return;
	send_raw(t, "data: [DONE]\n\n", 14);
	client_read_limit(t, 0);
	evhttp_connection_set_closecb(t->evcon, NULL, NULL);
	evhttp_send_reply_end(t->req);
	t->req = NULL;
	t->evcon = NULL;
}

/* An in-stream failure before any worker took it: error, finish, done. */
static void
fail_stream(struct gwturn *t, const char *message)
{
	char	*s;
	json_t	*j;

	j = json_pack("{s:s, s:s}", "type", "error", "errorText", message);
	s = json_dumps(j, JSON_COMPACT);
	send_event(t, s);
	free(s);
	json_decref(j);
	send_event(t, "{\"type\":\"finish\",\"finishReason\":\"error\"}");
	finish_stream(t);
}

/*
 * The client is gone: a waiting Turn just goes; a running one is
 * cancelled and ends when its worker says.
 */
static void
client_gone(struct gwturn *t)
{
	struct msg	 m;

	if (t->worker == NULL) {
		turn_free(t);
		return;
	}
	proto_msg_init(&m, MSG_CANCEL);
	m.cancel.turn = t->id;
	chan_send(t->worker->chan, &m);
}

static void
beat(evutil_socket_t fd, short events, void *arg)
{
	struct gwturn	*t = arg;
	struct evhttp_connection *evcon;

	(void)fd;
	(void)events;
	if (t->req == NULL)
		return;
	if (t->slow) {
		evcon = t->evcon;
		evhttp_connection_set_closecb(evcon, NULL, NULL);
		t->req = NULL;
		t->evcon = NULL;
		evhttp_connection_free(evcon);
		client_gone(t);
		return;
	}
	/* The prelude until the Run starts; then a comment keeps it alive. */
	if (!t->started)
		send_event(t, PRELUDE);
	else
		send_raw(t, ": ping\n\n", 8);
	timer_add_ms(t->ev_beat,
	    (int64_t)gw->env->conf->heartbeat_seconds * 1000);
}

static void
turn_free(struct gwturn *t)
{
	if (t->queued) {
		TAILQ_REMOVE(&queue, t, entry);
		nqueued--;
	} else {
		TAILQ_REMOVE(&active, t, entry);
		nactive--;
	}
	if (t->worker != NULL)
		t->worker->turn = NULL;
	if (t->req != NULL) {
		client_read_limit(t, 0);
		evhttp_connection_set_closecb(t->evcon, NULL, NULL);
		evhttp_send_reply_end(t->req);
	}
	event_free(t->ev_beat);
	free(t->key);
	free(t->request);
	free(t->owner);
	free(t);
	stats_changed();
}

/* libevent detached the request when the client went away. */
static void
client_closed(struct evhttp_connection *evcon, void *arg)
{
	struct gwturn	*t = arg;

	evhttp_connection_set_closecb(evcon, NULL, NULL);
	log_info("turn %lld: the client disconnected", (long long)t->id);
	evhttp_send_reply_end(t->req);
	t->req = NULL;
	t->evcon = NULL;
	client_gone(t);
}

static struct worker *
idle_worker(void)
{
	struct worker	*w;

	TAILQ_FOREACH(w, &gw->workers, entry)
		if (w->instance > 0 && w->turn == NULL && !w->leaving)
			return w;
	return NULL;
}

static void
turn_assign(struct gwturn *t, struct worker *w)
{
	struct msg	 m;

	if (t->queued) {
		TAILQ_REMOVE(&queue, t, entry);
		nqueued--;
		t->queued = 0;
		TAILQ_INSERT_TAIL(&active, t, entry);
		nactive++;
	}
	t->worker = w;
	w->turn = t;
	proto_msg_init(&m, MSG_TURN);
	m.turn.turn = t->id;
	m.turn.session = t->session;
	m.turn.idempotency_key = t->key;
	m.turn.request = t->request;
	chan_send(w->chan, &m);
	stats_changed();
}

/* An active Turn waits for a worker: at the head when it was there. */
static void
turn_enqueue(struct gwturn *t, int at_head)
{
	TAILQ_REMOVE(&active, t, entry);
	nactive--;
	if (at_head)
		TAILQ_INSERT_HEAD(&queue, t, entry);
	else
		TAILQ_INSERT_TAIL(&queue, t, entry);
	t->queued = 1;
	nqueued++;
	stats_changed();
}

/* A worker is free: give it the oldest waiting Turn. */
void
turns_worker_idle(struct worker *w)
{
	struct gwturn	*t;

	if (w->turn == NULL && !w->leaving &&
	    (t = TAILQ_FIRST(&queue)) != NULL)
		turn_assign(t, w);
}

static struct gwturn *
find(struct worker *w, int64_t id)
{
	return w->turn != NULL && w->turn->id == id ? w->turn : NULL;
}

void
turns_worker_msg(struct worker *w, struct msg *m)
{
	struct gwturn	*t;

	switch (m->type) {
	case MSG_TURN_STARTED:
		if ((t = find(w, m->turn_started.turn)) == NULL)
			break;
		strlcpy(t->run, m->turn_started.run, sizeof(t->run));
		free(t->owner);
		t->owner = xstrdup(m->turn_started.owner);
		break;
	case MSG_CHUNK:
		if ((t = find(w, m->chunk.turn)) == NULL)
			break;
		if (strncmp(m->chunk.json, "{\"type\":\"start\"", 15) == 0)
			t->started = 1;
		send_event(t, m->chunk.json);
		break;
	case MSG_TURN_END:
		if ((t = find(w, m->turn_end.turn)) == NULL)
			break;
		finish_stream(t);
		turn_free(t);
		turns_worker_idle(w);
		break;
	default:
		break;
	}
}

static void
settled(PGresult *res, const struct db_err *e, void *arg)
{
	char	*run = arg;

	if (res == NULL)
		log_warnx("run %s: could not settle it: %s", run, e->msg);
	else if (PQntuples(res) > 0)
		log_warnx("run %s settled as failed: its worker died", run);
	free(run);
}

/*
 * The worker died: end its stream now, and settle its Run, still under
 * the dead worker's claim (a claim already moved on is left alone).
 */
void
turns_worker_gone(struct worker *w)
{
	struct gwturn	*t = w->turn;
	const char	*p[2];

	if (t == NULL)
		return;
	t->worker = NULL;
	w->turn = NULL;
	/*
	 * A stopping worker can exit with a Turn it never read still on
	 * the wire: that Turn never began, so it waits for another worker.
	 */
	if (w->leaving && t->run[0] == '\0') {
		if (t->req == NULL) {
			turn_free(t);
			return;
		}
		log_info("turn %lld: its worker left before starting it; "
		    "requeued", (long long)t->id);
		turn_enqueue(t, 1);
		if ((w = idle_worker()) != NULL)
			turn_assign(t, w);
		return;
	}
	log_warnx("turn %lld: its worker died mid-Turn", (long long)t->id);
	if (t->run[0] != '\0' && t->owner != NULL) {
		p[0] = t->run;
		p[1] = t->owner;
		db_async_sql(gw->db, "UPDATE fleet_runs SET status = 'failed', "
		    "failure_code = 'execution_failed', failure_public_message "
		    "= 'Turn failed', claim_owner = NULL, claim_heartbeat_at = "
		    "NULL, terminal_intent = NULL, finished_at = now() WHERE id "
		    "= $1 AND claim_owner = $2 AND status IN ('running', "
		    "'settling') RETURNING id", 2, p, 10000, settled,
		    xstrdup(t->run));
	}
	/* Grammar: after a start, error then finish(error). */
	fail_stream(t, "Turn failed");
	turn_free(t);
}

/* PUT /api/runs/{id}/cancellation, when the Run is one of ours. */
void
turns_cancel_run(const char *run)
{
	struct gwturn	*t;
	struct msg	 m;

	TAILQ_FOREACH(t, &active, entry) {
		if (t->worker == NULL || strcmp(t->run, run) != 0)
			continue;
		proto_msg_init(&m, MSG_CANCEL);
		m.cancel.turn = t->id;
		chan_send(t->worker->chan, &m);
		return;
	}
}

static int
valid_uuid(const char *s)
{
	uuid_t	 u;

	return s != NULL && strlen(s) == 36 && uuid_parse(s, u) == 0;
}

/*
 * The CreateTurnRequest: {text: 1..100000, attachment_ids: unique
 * UUIDs, skill_selections}, nothing else.  Returns the canonical
 * request for the worker, or NULL with code and message set.
 */
static char *
turn_request(json_t *body, const char **code, const char **message)
{
	json_t		*text, *ids, *skills, *id, *out;
	const char	*key;
	size_t		 i, j;
	char		*s;

	*code = "validation_error";
	*message = "Request validation failed.";
	if (!json_is_object(body))
		return NULL;
	json_object_foreach(body, key, text)
		if (strcmp(key, "text") != 0 &&
		    strcmp(key, "attachment_ids") != 0 &&
		    strcmp(key, "skill_selections") != 0)
			return NULL;
	text = json_object_get(body, "text");
	if (!json_is_string(text) || json_string_length(text) == 0 ||
	    json_string_length(text) > TEXT_MAX * 4)
		return NULL;
	ids = json_object_get(body, "attachment_ids");
	if (ids != NULL && !json_is_null(ids)) {
		if (!json_is_array(ids) ||
		    json_array_size(ids) > ATTACHMENTS_MAX)
			return NULL;
		json_array_foreach(ids, i, id) {
			if (!valid_uuid(json_string_value(id)))
				return NULL;
			for (j = 0; j < i; j++)
				if (strcmp(json_string_value(id),
				    json_string_value(json_array_get(ids,
				    j))) == 0)
					return NULL;
		}
	}
	skills = json_object_get(body, "skill_selections");
	if (skills != NULL && !json_is_null(skills) &&
	    (!json_is_array(skills) || json_array_size(skills) > 0)) {
		/* No Skill catalog here: any selection is invalid. */
		*code = "invalid_skill_selection";
		*message = "Invalid Skill selection";
		return NULL;
	}
	if (utf8_chars(json_string_value(text), json_string_length(text)) >
	    TEXT_MAX)
		return NULL;
	out = json_pack("{s:O, s:o}", "text", text, "attachment_ids",
	    ids != NULL && !json_is_null(ids) ? json_incref(ids) :
	    json_array());
	s = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	return s;
}

void
turns_post(struct evhttp_request *req, const char *session_id)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*in = evhttp_request_get_input_buffer(req);
	struct gwturn		*t;
	struct worker		*w;
	const char		*key, *code, *message;
	json_error_t		 jerr;
	json_t			*body;
	char			*request;
	size_t			 len;

	key = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Idempotency-Key");
	if (key == NULL || *key == '\0' || strlen(key) > 128 ||
	    !valid_uuid(session_id)) {
		http_error(req, 422, "validation_error",
		    "Request validation failed.");
		return;
	}
	len = evbuffer_get_length(in);
	body = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0,
	    &jerr);
	request = turn_request(body, &code, &message);
	json_decref(body);
	if (request == NULL) {
		http_error(req, 422, code, message);
		return;
	}

	t = xcalloc(1, sizeof(*t));
	t->id = ++next_id;
	t->req = req;
	t->evcon = evhttp_request_get_connection(req);
	strlcpy(t->session, session_id, sizeof(t->session));
	t->key = xstrdup(key);
	t->request = request;
	if ((t->ev_beat = evtimer_new(gw->base, beat, t)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	TAILQ_INSERT_TAIL(&active, t, entry);
	nactive++;

	evhttp_add_header(h, "Content-Type", "text/event-stream");
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	evhttp_add_header(h, "x-vercel-ai-ui-message-stream", "v1");
	evhttp_send_reply_start(req, 200, "OK");
	evhttp_connection_set_closecb(t->evcon, client_closed, t);
	client_read_limit(t, CLIENT_READ_MAX);
	send_event(t, PRELUDE);
	timer_add_ms(t->ev_beat,
	    (int64_t)gw->env->conf->heartbeat_seconds * 1000);

	if (strcmp(gw->state, "ready") != 0) {
		fail_stream(t, "Turn is unavailable");
		turn_free(t);
		return;
	}
	if ((w = idle_worker()) != NULL) {
		turn_assign(t, w);
		return;
	}
	if (nqueued >= gw->env->conf->turn_queue_max) {
		log_warnx("turn %lld: every worker is busy and the queue is "
		    "full", (long long)t->id);
		fail_stream(t, "Turn is unavailable");
		turn_free(t);
		return;
	}
	turn_enqueue(t, 0);
}

void
turns_free(void)
{
	struct gwturn	*t;

	while ((t = TAILQ_FIRST(&queue)) != NULL) {
		fail_stream(t, "Turn is unavailable");
		turn_free(t);
	}
	while ((t = TAILQ_FIRST(&active)) != NULL) {
		fail_stream(t, "Turn is unavailable");
		turn_free(t);
	}
}
