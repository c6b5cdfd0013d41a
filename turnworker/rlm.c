#include <sys/types.h>
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "chunks.h"
#include "kernel.h"
#include "lm.h"
#include "prompt.h"
#include "rlm.h"

struct hreq;

struct subcall {
	struct hreq		*h;
	int			 index;
	struct lm_call		*call;
};

/* A host_request from the kernel, answered when its calls are done. */
struct hreq {
	TAILQ_ENTRY(hreq)	 entry;
	struct rlm		*r;
	char			*id;
	int64_t			 token;
	int			 batch;
	int			 n;
	int			 pending;
	json_t			*results;
	struct subcall		*calls;
};

enum rlm_phase {
	PH_BIND,
	PH_THINK,	/* the root model is writing */
	PH_EXEC,	/* the kernel runs a cell */
	PH_EXTRACT,
	PH_DONE
};

struct rlm {
	struct event_base	*base;
	struct lm		*lm;
	struct lm		*lm_sub;
	struct kernel		*kernel;
	struct rlm_params	 p;
	const struct rlm_ops	*ops;
	void			*arg;
	char			 run[40];
	json_t			*vars;
	char			*variables;	/* their description */
	char			*system;
	struct evbuffer		*history;
	enum rlm_phase		 phase;
	int			 step;
	int			 reasks;
	int64_t			 step_start;
	json_t			*reask_msgs;
	struct lm_call		*root;
	struct evbuffer		*reply;
	int			 reasoning_open;
	char			 reasoning_id[128];
	char			*code;
	char			*reasoning;
	struct evbuffer		*out;
	char			 cell[32];
	int			 cells;
	int			 timed_out;
	int64_t			 exec_bytes;
	struct event		*ev_exec;
	TAILQ_HEAD(, hreq)	 hreqs;
	int			 llm_calls;	/* sub-model prompts */
	int			 root_calls;
	int			 children;
	struct lm_usage		 usage;
	int			 iterations;
	json_t			*submitted;
	int64_t			 exec_start;
	int64_t			 exec_us;	/* kernel time, all cells */
	int64_t			 lm_start;
	int64_t			 lm_us;		/* root model time */
};

static void	think(struct rlm *);
static void	fail(struct rlm *, const char *, const char *, const char *);
static void	hreq_free(struct hreq *);

static void
emit(struct rlm *r, json_t *chunk)
{
	if (r->ops->chunk != NULL)
		r->ops->chunk(chunk, r->arg);
	else
		json_decref(chunk);
}

static void
record(struct rlm *r, json_t *part)
{
	if (r->ops->part != NULL)
		r->ops->part(part, r->arg);
	else
		json_decref(part);
}

void
rlm_add_usage(struct rlm *r, const struct lm_usage *u, int calls)
{
	r->usage.prompt_tokens += u->prompt_tokens;
	r->usage.completion_tokens += u->completion_tokens;
	r->usage.total_tokens += u->total_tokens;
	r->root_calls += calls;
}

struct lm_usage
rlm_usage(struct rlm *r)
{
	return r->usage;
}

int
rlm_iterations(struct rlm *r)
{
	return r->iterations;
}

int
rlm_lm_calls(struct rlm *r)
{
	return r->root_calls;
}

int
rlm_sub_calls(struct rlm *r)
{
	return r->llm_calls;
}

/* Time spent in the kernel's cells and in root model calls, in µs. */
void
rlm_times(struct rlm *r, int64_t *exec_us, int64_t *lm_us)
{
	*exec_us = r->exec_us;
	*lm_us = r->lm_us;
}

/* Stop everything in flight: no callback of ours runs after this. */
static void
quiesce(struct rlm *r)
{
	struct hreq	*h;

	r->phase = PH_DONE;
	if (r->root != NULL) {
		lm_cancel(r->root);
		r->root = NULL;
	}
	while ((h = TAILQ_FIRST(&r->hreqs)) != NULL)
		hreq_free(h);
	if (r->ev_exec != NULL)
		evtimer_del(r->ev_exec);
}

static void
fail(struct rlm *r, const char *message, const char *code, const char *detail)
{
	struct rlm_outcome	 o;

	if (r->phase == PH_DONE)
		return;
	if (r->reasoning_open) {
		emit(r, chunk_id("reasoning-end", r->reasoning_id));
		r->reasoning_open = 0;
	}
	quiesce(r);
	memset(&o, 0, sizeof(o));
	o.message = message;
	o.code = code;
	o.detail = detail;
	r->ops->done(r, &o, r->arg);
}

static void
succeed(struct rlm *r, const char *answer, json_t *outputs)
{
	struct rlm_outcome	 o;

	quiesce(r);
	memset(&o, 0, sizeof(o));
	o.ok = 1;
	o.answer = answer;
	o.outputs = outputs;
	r->ops->done(r, &o, r->arg);
}

static void
host_reply(struct rlm *r, const char *id, json_t *result, const char *error)
{
	json_t	*req;

	if (error != NULL)
		req = json_pack("{s:s, s:s, s:b, s:s}", "type", "host_reply",
		    "id", id, "ok", 0, "error", error);
	else
		req = json_pack("{s:s, s:s, s:b, s:O}", "type", "host_reply",
		    "id", id, "ok", 1, "result", result);
	kernel_send(r->kernel, req);
	json_decref(req);
}

static void
hreq_free(struct hreq *h)
{
	int	 i;

	TAILQ_REMOVE(&h->r->hreqs, h, entry);
	for (i = 0; i < h->n; i++)
		if (h->calls[i].call != NULL)
			lm_cancel(h->calls[i].call);
	free(h->calls);
	json_decref(h->results);
	free(h->id);
	free(h);
}

static void
sub_done(struct lm_result *res, void *arg)
{
	struct subcall	*sc = arg;
	struct hreq	*h = sc->h;
	struct rlm	*r = h->r;
	char		*err;

	sc->call = NULL;
	rlm_add_usage(r, &res->usage, 0);
	if (res->error == LM_OK)
		json_array_set_new(h->results, sc->index,
		    json_stringn(res->text, res->len));
	else {
		log_warnx("run %s: llm_query: %s (%s)", r->run,
		    lm_error_name(res->error), res->detail);
		xasprintf(&err, "[ERROR] %s", lm_error_message(res->error));
		json_array_set_new(h->results, sc->index, json_string(err));
		free(err);
	}
	if (--h->pending > 0)
		return;
	if (h->batch)
		host_reply(r, h->id, h->results, NULL);
	else {
		json_t *v = json_array_get(h->results, 0);

		if (res->error != LM_OK)
			host_reply(r, h->id, NULL, lm_error_message(res->error));
		else
			host_reply(r, h->id, v, NULL);
	}
	hreq_free(h);
}

static struct hreq *
hreq_new(struct rlm *r, const char *id, int n, int batch)
{
	struct hreq	*h;
	int		 i;

	h = xcalloc(1, sizeof(*h));
	h->r = r;
	h->id = xstrdup(id);
	h->batch = batch;
	h->n = n;
	h->pending = n;
	h->results = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(h->results, json_null());
	h->calls = n > 0 ? xcalloc(n, sizeof(*h->calls)) : NULL;
	TAILQ_INSERT_TAIL(&r->hreqs, h, entry);
	return h;
}

/* Ask the sub-model each prompt, all at once; answers keep their order. */
static void
llm_query(struct rlm *r, const char *id, json_t *prompts, int batch)
{
	struct lm_request	 req;
	struct hreq		*h;
	json_t			*msgs, *pr;
	char			*m, err[256];
	size_t			 i, n = json_array_size(prompts);

	json_array_foreach(prompts, i, pr) {
		if (!json_is_string(pr)) {
			host_reply(r, id, NULL, "prompts must be strings");
			return;
		}
	}
	if (r->llm_calls + (int)n > r->p.max_llm_calls) {
		snprintf(err, sizeof(err), "LLM call limit exceeded: %d + %zu "
		    "> %d. Use Python code for aggregation instead of more "
		    "calls.", r->llm_calls, n, r->p.max_llm_calls);
		host_reply(r, id, NULL, err);
		return;
	}
	if (n == 0) {
		json_t *empty = json_array();

		host_reply(r, id, empty, NULL);
		json_decref(empty);
		return;
	}
	r->llm_calls += n;
	h = hreq_new(r, id, n, batch);
	json_array_foreach(prompts, i, pr) {
		msgs = json_pack("[{s:s, s:O}]", "role", "user", "content", pr);
		m = json_dumps(msgs, JSON_COMPACT);
		json_decref(msgs);
		memset(&req, 0, sizeof(req));
		req.model = r->p.sub_model;
		req.messages = m;
		req.max_tokens = r->p.sub_max_tokens;
		req.temperature = 0;
		req.stream = 0;
		req.on_done = sub_done;
		req.arg = &h->calls[i];
		h->calls[i].h = h;
		h->calls[i].index = i;
		h->calls[i].call = lm_call(r->lm_sub, &req);
		free(m);
	}
}

static void
rlm_query(struct rlm *r, const char *id, json_t *params)
{
	const char	*task = json_string_value(json_object_get(params,
			    "task"));
	json_t		*ctx = json_object_get(params, "context");
	struct hreq	*h;
	static int64_t	 tokens;

	if (task == NULL) {
		host_reply(r, id, NULL, "rlm_query needs a task string");
		return;
	}
	if (r->p.depth > 0 || !r->p.recursion || r->ops->child == NULL) {
		/* No grandchildren: delegation falls back to the sub-model. */
		json_t *prompts;
		char *prompt;

		if (r->p.depth == 0 && !r->p.recursion) {
			host_reply(r, id, NULL, "rlm_query is not enabled in "
			    "this profile; use llm_query");
			return;
		}
		if (ctx != NULL && !json_is_null(ctx)) {
			char *c = json_is_string(ctx) ?
			    xstrdup(json_string_value(ctx)) :
			    json_dumps(ctx, JSON_COMPACT | JSON_ENCODE_ANY);

			xasprintf(&prompt, "%s\n\nContext:\n%s", task, c);
			free(c);
		} else
			prompt = xstrdup(task);
		prompts = json_pack("[s]", prompt);
		free(prompt);
		llm_query(r, id, prompts, 0);
		json_decref(prompts);
		return;
	}
	if (r->children >= r->p.recursion_max_calls) {
		host_reply(r, id, NULL, "rlm_query limit reached: use "
		    "llm_query or Python instead");
		return;
	}
	r->children++;
	h = hreq_new(r, id, 0, 0);
	h->token = ++tokens;
	r->ops->child(r, h->token, task, ctx, r->arg);
}

/* A child RLM ended: answer the rlm_query that started it. */
void
rlm_child_answer(struct rlm *r, int64_t token, const char *answer,
    const char *error)
{
	struct hreq	*h;
	json_t		*v;

	TAILQ_FOREACH(h, &r->hreqs, entry)
		if (h->token == token)
			break;
	if (h == NULL)
		return;
	if (answer != NULL) {
		v = json_string(answer);
		host_reply(r, h->id, v, NULL);
		json_decref(v);
	} else
		host_reply(r, h->id, NULL, error);
	hreq_free(h);
}

static void
host_request(struct rlm *r, json_t *ev)
{
	const char	*id = json_string_value(json_object_get(ev, "id"));
	const char	*method = json_string_value(json_object_get(ev,
			    "method"));
	json_t		*params = json_object_get(ev, "params"), *one;

	if (id == NULL || method == NULL || !json_is_object(params)) {
		fail(r, "Turn failed", "execution_failed",
		    "malformed host_request from the kernel");
		return;
	}
	if (strcmp(method, "llm_query") == 0) {
		if (!json_is_string(json_object_get(params, "prompt"))) {
			host_reply(r, id, NULL, "prompt must be a string");
			return;
		}
		one = json_pack("[O]", json_object_get(params, "prompt"));
		llm_query(r, id, one, 0);
		json_decref(one);
	} else if (strcmp(method, "llm_query_batched") == 0) {
		if (!json_is_array(json_object_get(params, "prompts")))
			host_reply(r, id, NULL, "prompts must be a list");
		else
			llm_query(r, id, json_object_get(params, "prompts"),
			    1);
	} else if (strcmp(method, "rlm_query") == 0)
		rlm_query(r, id, params);
	else
		host_reply(r, id, NULL, "unknown host method");
}

static void
step_finish(struct rlm *r)
{
	int64_t	 ms = now_ms() - r->step_start;

	emit(r, chunk_type("finish-step"));
	record(r, json_pack("{s:s, s:s, s:i, s:I}", "type", "step", "state",
	    "finished", "step", r->step, "duration_ms", (json_int_t)ms));
}

static void
cell_done(struct rlm *r, const char *status, json_t *outputs)
{
	json_t		*answer;
	char		*output, *entry, *shown, id[128], *ans;
	int		 submitted = strcmp(status, "submitted") == 0;

	evtimer_del(r->ev_exec);
	r->exec_us += now_us() - r->exec_start;
	if (r->timed_out)
		evbuffer_add_printf(r->out, "\n[Error] the cell ran longer than "
		    "execution_timeout (%d s) and was interrupted\n",
		    r->p.execution_timeout);
	answer = submitted ? json_object_get(outputs, "answer") : NULL;
	if (submitted && answer == NULL)
		evbuffer_add_printf(r->out, "\n[Error] Missing output fields: "
		    "[answer]. Use SUBMIT(answer=...)\n");
	if (evbuffer_get_length(r->out) == 0)
		evbuffer_add_printf(r->out, "%s", submitted ?
		    "(submitted)" : "(no output - did you forget to print?)");
	output = buf_take(r->out);

	shown = prompt_cut(output, strlen(output), RLM_STREAM_OUTPUT_MAX);
	snprintf(id, sizeof(id), "output-%s-%d", r->run, r->step);
	emit(r, chunk_data("data-rlm-output", id, json_pack("{s:s, s:i, "
	    "s:b, s:b}", "output", shown, "step", r->step, "is_delta", 0,
	    "is_final", 1)));
	record(r, json_pack("{s:s, s:s, s:i}", "type", "output", "output",
	    shown, "step", r->step));
	free(shown);
	step_finish(r);

	entry = prompt_history_entry(r->step, r->reasoning, r->code, output,
	    r->p.max_output_chars);
	evbuffer_add(r->history, entry, strlen(entry));
	free(entry);
	free(output);
	free(r->code);
	free(r->reasoning);
	r->code = r->reasoning = NULL;

	if (answer != NULL) {
		ans = json_is_string(answer) ? xstrdup(json_string_value(
		    answer)) : json_dumps(answer, JSON_COMPACT |
		    JSON_ENCODE_ANY);
		succeed(r, ans, outputs);
		free(ans);
		return;
	}
	think(r);
}

static void
exec_timeout(evutil_socket_t fd, short events, void *arg)
{
	struct rlm	*r = arg;
	json_t		*req;

	(void)fd;
	(void)events;
	if (r->phase != PH_EXEC)
		return;
	if (r->timed_out) {
		fail(r, "Turn failed", "execution_failed", "the kernel did not "
		    "stop after an interrupt");
		return;
	}
	r->timed_out = 1;
	log_warnx("run %s: cell %s ran past execution_timeout (%d s); "
	    "interrupting it", r->run, r->cell, r->p.execution_timeout);
	req = json_pack("{s:s, s:s}", "type", "interrupt", "id", r->cell);
	kernel_send(r->kernel, req);
	json_decref(req);
	timer_add_ms(r->ev_exec, RLM_INTERRUPT_GRACE_MS);
}

static void
append_output(struct rlm *r, const char *text, size_t len)
{
	r->exec_bytes += len;
	evbuffer_add(r->out, text, len);
}

static void
kernel_event(struct kernel *k, json_t *ev, void *arg)
{
	struct rlm	*r = arg;
	const char	*event = json_string_value(json_object_get(ev, "event"));
	const char	*id = json_string_value(json_object_get(ev, "id"));
	const char	*s, *ename, *evalue;
	char		*line;
	int		 n;

	(void)k;
	if (event == NULL || r->phase == PH_DONE)
		return;
	if (strcmp(event, "host_request") == 0) {
		host_request(r, ev);
		return;
	}
	if (strcmp(event, "error") == 0 && id == NULL) {
		fail(r, "Turn failed", "execution_failed", "the kernel refused "
		    "a request");
		return;
	}
	if (r->phase == PH_BIND) {
		if (strcmp(event, "done") != 0)
			return;
		s = json_string_value(json_object_get(ev, "status"));
		if (s == NULL || strcmp(s, "ok") != 0) {
			fail(r, "Turn could not be prepared",
			    "preparation_failed", "binding the input failed");
			return;
		}
		think(r);
		return;
	}
	if (r->phase != PH_EXEC || id == NULL || strcmp(id, r->cell) != 0)
		return;
	if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
		if ((s = json_string_value(json_object_get(ev, "text"))) !=
		    NULL)
			append_output(r, s, strlen(s));
	} else if (strcmp(event, "result") == 0) {
		if ((s = json_string_value(json_object_get(ev, "text"))) !=
		    NULL) {
			append_output(r, s, strlen(s));
			append_output(r, "\n", 1);
		}
	} else if (strcmp(event, "error") == 0) {
		s = json_string_value(json_object_get(ev, "traceback"));
		if (s == NULL || *s == '\0') {
			ename = json_string_value(json_object_get(ev,
			    "ename"));
			evalue = json_string_value(json_object_get(ev,
			    "evalue"));
			n = xasprintf(&line, "%s: %s\n", ename ? ename :
			    "Error", evalue ? evalue : "");
			append_output(r, line, n);
			free(line);
		} else
			append_output(r, s, strlen(s));
	} else if (strcmp(event, "done") == 0) {
		s = json_string_value(json_object_get(ev, "status"));
		cell_done(r, s ? s : "error", json_object_get(ev, "outputs"));
		return;
	}
	if (r->exec_bytes > r->p.max_execution_output_bytes)
		fail(r, "Turn output is too large", "execution_failed",
		    "max_execution_output_bytes exhausted");
}

static void
kernel_closed(struct kernel *k, const char *why, void *arg)
{
	struct rlm	*r = arg;
	char		 detail[256];

	(void)k;
	snprintf(detail, sizeof(detail), "kernel gone: %s", why);
	fail(r, "Turn failed", "execution_failed", detail);
}

static const struct kernel_ops kops = { kernel_event, kernel_closed };

static void
execute(struct rlm *r)
{
	json_t	*req;
	char	 id[128];

	snprintf(id, sizeof(id), "code-%s-%d", r->run, r->step);
	emit(r, chunk_data("data-rlm-code", id, json_pack("{s:s, s:i, s:b, "
	    "s:b}", "code", r->code, "step", r->step, "is_delta", 0,
	    "is_final", 1)));
	record(r, json_pack("{s:s, s:s, s:i}", "type", "code", "code",
	    r->code, "step", r->step));
	r->phase = PH_EXEC;
	r->timed_out = 0;
	snprintf(r->cell, sizeof(r->cell), "c%d", ++r->cells);
	req = json_pack("{s:s, s:s, s:s}", "type", "execute", "id", r->cell,
	    "code", r->code);
	r->exec_start = now_us();
	kernel_send(r->kernel, req);
	json_decref(req);
	timer_add_ms(r->ev_exec, (int64_t)r->p.execution_timeout * 1000);
}

static void
root_delta(const char *text, size_t len, void *arg)
{
	struct rlm	*r = arg;
	char		*d;

	if (!r->reasoning_open) {
		emit(r, chunk_id("reasoning-start", r->reasoning_id));
		r->reasoning_open = 1;
	}
	d = xstrndup(text, len);
	emit(r, chunk_delta("reasoning-delta", r->reasoning_id, d));
	free(d);
}

static char *
messages_json(struct rlm *r, const char *system, const char *user,
    json_t *extra)
{
	json_t	*msgs;
	char	*s;

	msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system",
	    "content", system, "role", "user", "content", user);
	if (extra != NULL)
		json_array_extend(msgs, extra);
	s = json_dumps(msgs, JSON_COMPACT);
	json_decref(msgs);
	(void)r;
	return s;
}

static void root_call(struct rlm *);

/* A call to the root model; streamed replies are shown as reasoning. */
static void
root_request(struct rlm *r, char *msgs, int stream,
    void (*done)(struct lm_result *, void *))
{
	struct lm_request	 req;

	memset(&req, 0, sizeof(req));
	req.model = r->p.root_model;
	req.messages = msgs;
	req.max_tokens = r->p.root_max_tokens;
	req.temperature = -1;
	req.stream = stream;
	req.on_delta = stream ? root_delta : NULL;
	req.on_done = done;
	req.arg = r;
	r->lm_start = now_us();
	r->root = lm_call(r->lm, &req);
	free(msgs);
}

static void
root_done(struct lm_result *res, void *arg)
{
	struct rlm	*r = arg;
	char		*reply, detail[600], *code, *reasoning;

	r->root = NULL;
	r->lm_us += now_us() - r->lm_start;
	rlm_add_usage(r, &res->usage, 1);
	if (r->reasoning_open) {
		emit(r, chunk_id("reasoning-end", r->reasoning_id));
		r->reasoning_open = 0;
	}
	if (res->error != LM_OK) {
		snprintf(detail, sizeof(detail), "root model: %s: %s",
		    lm_error_name(res->error), res->detail);
		fail(r, lm_error_message(res->error), "execution_failed",
		    detail);
		return;
	}
	reply = xstrndup(res->text, res->len);
	record(r, json_pack("{s:s, s:s, s:i, s:s}", "type", "reasoning",
	    "text", reply, "step", r->step, "id", r->reasoning_id));
	if (!prompt_code(reply, &code, &reasoning)) {
		if (r->reasks >= RLM_REASKS) {
			free(reply);
			fail(r, "Turn failed", "execution_failed", "the model "
			    "replied without a code block, three times");
			return;
		}
		/* Ask again, showing the model what it said. */
		r->reasks++;
		json_array_append_new(r->reask_msgs, json_pack("{s:s, s:s}",
		    "role", "assistant", "content", reply));
		json_array_append_new(r->reask_msgs, json_pack("{s:s, s:s}",
		    "role", "user", "content", "Your reply had no ```python "
		    "code block. Reply with your reasoning and exactly one "
		    "```python code block."));
		free(reply);
		root_call(r);
		return;
	}
	free(reply);
	r->code = code;
	r->reasoning = reasoning;
	execute(r);
}

static void
root_call(struct rlm *r)
{
	char	*hist, *user, *msgs;

	snprintf(r->reasoning_id, sizeof(r->reasoning_id), "reasoning-%s-%d%s",
	    r->run, r->step, "");
	if (r->reasks > 0)
		snprintf(r->reasoning_id, sizeof(r->reasoning_id),
		    "reasoning-%s-%d-%d", r->run, r->step, r->reasks);
	hist = buf_take(r->history);
	evbuffer_add(r->history, hist, strlen(hist));
	user = prompt_user(r->variables, hist, r->step, r->p.max_iters);
	msgs = messages_json(r, r->system, user, r->reask_msgs);
	free(hist);
	free(user);
	r->phase = PH_THINK;
	root_request(r, msgs, 1, root_done);
}

static void
extract_done(struct lm_result *res, void *arg)
{
	struct rlm	*r = arg;
	char		*answer, detail[600];
	size_t		 len = res->len;

	r->root = NULL;
	r->lm_us += now_us() - r->lm_start;
	rlm_add_usage(r, &res->usage, 1);
	if (res->error != LM_OK) {
		snprintf(detail, sizeof(detail), "extract: %s: %s",
		    lm_error_name(res->error), res->detail);
		fail(r, lm_error_message(res->error), "execution_failed",
		    detail);
		return;
	}
	while (len > 0 && (res->text[len - 1] == '\n' ||
	    res->text[len - 1] == ' '))
		len--;
	if (len == 0) {
		fail(r, "Turn output is invalid", "execution_failed",
		    "the extract call gave an empty answer");
		return;
	}
	answer = xstrndup(res->text, len);
	succeed(r, answer, NULL);
	free(answer);
}

/* Out of steps: one call to have the answer said. */
static void
extract(struct rlm *r)
{
	char	*hist, *user, *msgs, *sys;

	log_info("run %s: max_iters (%d) spent; asking for the answer", r->run,
	    r->p.max_iters);
	hist = buf_take(r->history);
	xasprintf(&user, "Variables:\n\n%s\nREPL history:\n\n%s\n\nGive the "
	    "final answer now.", r->variables, hist);
	sys = prompt_extract_system();
	msgs = messages_json(r, sys, user, NULL);
	free(hist);
	free(user);
	free(sys);
	r->phase = PH_EXTRACT;
	root_request(r, msgs, 0, extract_done);
}

/* The next step: the root model writes, then its code runs. */
static void
think(struct rlm *r)
{
	if (r->step >= r->p.max_iters) {
		extract(r);
		return;
	}
	r->step++;
	r->iterations = r->step;
	r->reasks = 0;
	json_array_clear(r->reask_msgs);
	r->step_start = now_ms();
	emit(r, chunk_type("start-step"));
	record(r, json_pack("{s:s, s:s, s:i}", "type", "step", "state",
	    "started", "step", r->step));
	root_call(r);
}

/*
 * A run over the kernel whose stdin and stdout are kin and kout, with
 * vars (an object) bound as its input variables; the root model is
 * called through lm, the sub-model through lm_sub.
 */
struct rlm *
rlm_new(struct event_base *base, struct lm *lm, struct lm *lm_sub, int kin,
    int kout, const struct rlm_params *p, const char *run, json_t *vars,
    const struct rlm_ops *ops, void *arg)
{
	struct rlm		*r;
	struct prompt_env	 pe;

	r = xcalloc(1, sizeof(*r));
	r->base = base;
	r->lm = lm;
	r->lm_sub = lm_sub;
	r->p = *p;
	r->ops = ops;
	r->arg = arg;
	snprintf(r->run, sizeof(r->run), "%s", run);
	r->vars = json_incref(vars);
	r->variables = prompt_variables(vars);
	memset(&pe, 0, sizeof(pe));
	pe.max_iters = p->max_iters;
	pe.max_llm_calls = p->max_llm_calls;
	pe.max_output_chars = p->max_output_chars;
	pe.recursion = p->recursion && p->depth == 0;
	pe.child = p->depth > 0;
	r->system = prompt_system(&pe);
	if ((r->history = evbuffer_new()) == NULL ||
	    (r->reply = evbuffer_new()) == NULL ||
	    (r->out = evbuffer_new()) == NULL)
		fatalx("%s: evbuffer_new", __func__);
	r->reask_msgs = json_array();
	TAILQ_INIT(&r->hreqs);
	if ((r->ev_exec = evtimer_new(base, exec_timeout, r)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	r->kernel = kernel_open(base, kin, kout, &kops, r);
	return r;
}

/* Bind the input, then step. */
void
rlm_start(struct rlm *r)
{
	json_t	*req;

	r->phase = PH_BIND;
	req = json_pack("{s:s, s:s, s:O}", "type", "bind", "id", "bind",
	    "variables", r->vars);
	kernel_send(r->kernel, req);
	json_decref(req);
}

void
rlm_free(struct rlm *r)
{
	if (r == NULL)
		return;
	quiesce(r);
	kernel_free(r->kernel);
	event_free(r->ev_exec);
	evbuffer_free(r->history);
	evbuffer_free(r->reply);
	evbuffer_free(r->out);
	json_decref(r->reask_msgs);
	json_decref(r->vars);
	json_decref(r->submitted);
	free(r->variables);
	free(r->system);
	free(r->code);
	free(r->reasoning);
	free(r);
}
