#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "chunks.h"

static json_t *
must(json_t *j)
{
	if (j == NULL)
		fatalx("chunk: json_pack");
	return j;
}

/* start: the run id is the message id. */
json_t *
chunk_start(const char *run, const char *session, const char *created,
    const char *delivery)
{
	return must(json_pack("{s:s, s:s, s:{s:i, s:s, s:s, s:s, s:s}}",
	    "type", "start", "messageId", run, "messageMetadata",
	    "schemaVersion", 1, "runId", run, "sessionId", session,
	    "createdAt", created, "delivery", delivery));
}

json_t *
chunk_type(const char *type)
{
	return must(json_pack("{s:s}", "type", type));
}

json_t *
chunk_id(const char *type, const char *id)
{
	return must(json_pack("{s:s, s:s}", "type", type, "id", id));
}

json_t *
chunk_delta(const char *type, const char *id, const char *delta)
{
	return must(json_pack("{s:s, s:s, s:s}", "type", type, "id", id,
	    "delta", delta));
}

/* A data-* chunk; takes the reference to data. */
json_t *
chunk_data(const char *type, const char *id, json_t *data)
{
	json_t	*j = must(json_pack("{s:s, s:o}", "type", type, "data", data));

	if (id != NULL)
		json_object_set_new(j, "id", json_string(id));
	return j;
}

json_t *
chunk_finish(const char *reason, json_t *metadata)
{
	json_t	*j = must(json_pack("{s:s, s:s}", "type", "finish",
		    "finishReason", reason));

	if (metadata != NULL)
		json_object_set_new(j, "messageMetadata", metadata);
	return j;
}

json_t *
chunk_error(const char *text)
{
	return must(json_pack("{s:s, s:s}", "type", "error", "errorText",
	    text));
}

json_t *
chunk_abort(const char *reason)
{
	return must(json_pack("{s:s, s:s}", "type", "abort", "reason",
	    reason));
}

/*
 * Emit the chunks of committed parts, in order: what a replay sends, and
 * the committed suffix of a live Turn.  Ids follow the live stream's.
 */
void
chunks_project(json_t *parts, const char *run, chunk_emit emit, void *arg)
{
	json_t		*p;
	const char	*type, *state;
	char		 id[128];
	size_t		 i;
	json_int_t	 step;

	json_array_foreach(parts, i, p) {
		type = json_string_value(json_object_get(p, "type"));
		step = json_integer_value(json_object_get(p, "step"));
		if (type == NULL)
			continue;
		if (strcmp(type, "step") == 0) {
			state = json_string_value(json_object_get(p, "state"));
			emit(chunk_type(state != NULL &&
			    strcmp(state, "finished") == 0 ? "finish-step" :
			    "start-step"), arg);
		} else if (strcmp(type, "reasoning") == 0) {
			snprintf(id, sizeof(id), "reasoning-%s-%lld", run,
			    (long long)step);
			emit(chunk_id("reasoning-start", id), arg);
			emit(chunk_delta("reasoning-delta", id,
			    json_string_value(json_object_get(p, "text"))),
			    arg);
			emit(chunk_id("reasoning-end", id), arg);
		} else if (strcmp(type, "code") == 0) {
			snprintf(id, sizeof(id), "code-%s-%lld", run,
			    (long long)step);
			emit(chunk_data("data-rlm-code", id, json_pack(
			    "{s:O, s:I, s:b, s:b}", "code",
			    json_object_get(p, "code"), "step", step,
			    "is_delta", 0, "is_final", 1)), arg);
		} else if (strcmp(type, "output") == 0) {
			snprintf(id, sizeof(id), "output-%s-%lld", run,
			    (long long)step);
			emit(chunk_data("data-rlm-output", id, json_pack(
			    "{s:O, s:I, s:b, s:b}", "output",
			    json_object_get(p, "output"), "step", step,
			    "is_delta", 0, "is_final", 1)), arg);
		} else if (strcmp(type, "child_progress") == 0) {
			emit(chunk_data("data-child-progress", NULL,
			    json_deep_copy(json_object_get(p, "data"))), arg);
		} else if (strcmp(type, "warning") == 0) {
			emit(chunk_data("data-warning", NULL, json_pack(
			    "{s:O, s:O}", "message",
			    json_object_get(p, "message"), "code",
			    json_object_get(p, "code"))), arg);
		} else if (strcmp(type, "usage") == 0) {
			snprintf(id, sizeof(id), "usage-%s", run);
			emit(chunk_data("data-usage", id, json_pack("{s:O}",
			    "usage", json_object_get(p, "usage"))), arg);
		} else if (strcmp(type, "text") == 0) {
			snprintf(id, sizeof(id), "text-%s", run);
			emit(chunk_id("text-start", id), arg);
			emit(chunk_delta("text-delta", id,
			    json_string_value(json_object_get(p, "text"))),
			    arg);
			emit(chunk_id("text-end", id), arg);
		}
	}
}
