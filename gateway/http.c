/*
 * HTTP plumbing and the routes that need no worker: /health and
 * /health/ready.  Errors use the reference's envelope
 * {"code": ..., "message": ...}.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "gateway.h"

static void	http_route(struct evhttp_request *, void *);
static void	route_health(struct evhttp_request *);
static void	route_ready(struct evhttp_request *);

void
http_init(void)
{
	if ((gw->http = evhttp_new(gw->base)) == NULL)
		fatalx("evhttp_new");
	evhttp_set_max_headers_size(gw->http, GW_HEADERS_MAX);
	/* The largest upload, with room for its multipart framing. */
	evhttp_set_max_body_size(gw->http,
	    gw->env->conf->max_upload_bytes + GW_BODY_SLACK);
	evhttp_set_timeout(gw->http, GW_HTTP_TIMEOUT);
	evhttp_set_allowed_methods(gw->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
	evhttp_set_default_content_type(gw->http, "application/json");
	evhttp_set_gencb(gw->http, http_route, NULL);
	if (evhttp_accept_socket_with_handle(gw->http,
	    gw->env->listenfd) == NULL)
		fatalx("evhttp_accept_socket_with_handle");
}

void
http_free(void)
{
	if (gw->http != NULL)
		evhttp_free(gw->http);
	gw->http = NULL;
}

/* Send body (a JSON document) with the given status. */
void
http_json(struct evhttp_request *req, int code, const char *body)
{
	struct evbuffer	*buf;
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	if ((buf = evbuffer_new()) == NULL)
		fatalx("evbuffer_new");
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evbuffer_add(buf, body, strlen(body));
	evbuffer_add(buf, "\n", 1);
	evhttp_send_reply(req, code, NULL, buf);
	evbuffer_free(buf);
}

void
http_error(struct evhttp_request *req, int code, const char *ecode,
    const char *message)
{
	json_t	*j;
	char	*s;

	j = json_pack("{s:s, s:s}", "code", ecode, "message", message);
	if (j == NULL || (s = json_dumps(j, JSON_COMPACT)) == NULL)
		fatalx("%s: json", __func__);
	http_json(req, code, s);
	free(s);
	json_decref(j);
}

static void
route_health(struct evhttp_request *req)
{
	http_json(req, 200, "{\"status\":\"ok\",\"app\":\"fleet\","
	    "\"version\":\"" FLEET_VERSION "\"}");
}

/* Ready only when the database answers SELECT 1 within the bound. */
static void
ready_db(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;

	if (res == NULL) {
		log_debug("readiness: database: %s", e->msg);
		http_error(req, 503, "service_not_ready",
		    "Database unavailable");
		return;
	}
	http_json(req, 200, "{\"status\":\"ready\",\"database\":\"ok\"}");
}

static void
route_ready(struct evhttp_request *req)
{
	if (strcmp(gw->state, "ready") != 0) {
		char	 msg[64];

		snprintf(msg, sizeof(msg), "Service is %s", gw->state);
		http_error(req, 503, "service_not_ready", msg);
		return;
	}
	if (workers_ready() == 0) {
		http_error(req, 503, "service_not_ready",
		    "No turn worker is available");
		return;
	}
	db_async_sql(gw->db, "SELECT 1", 0, NULL, GW_DB_CHECK_MS, ready_db,
	    req);
}

static void
http_route(struct evhttp_request *req, void *arg)
{
	const char		*uri = evhttp_request_get_uri(req);
	struct evhttp_uri	*u;
	const char		*path;
	enum evhttp_cmd_type	 method = evhttp_request_get_command(req);

	(void)arg;
	if ((u = evhttp_uri_parse(uri)) == NULL ||
	    (path = evhttp_uri_get_path(u)) == NULL) {
		http_error(req, 400, "bad_request", "Malformed request URI");
		if (u != NULL)
			evhttp_uri_free(u);
		return;
	}
	if (strncmp(path, "/api/", 5) == 0)
		api_route(req, path);
	else if (strcmp(path, "/health") == 0 ||
	    strcmp(path, "/health/ready") == 0) {
		if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD)
			http_error(req, 405, "http_405", "Method not allowed");
		else if (path[7] == '\0')
			route_health(req);
		else
			route_ready(req);
	} else
		http_error(req, 404, "not_found", "Not found");
	evhttp_uri_free(u);
}
