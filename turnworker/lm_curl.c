/*
 * The multi handle, the hiperfifo way: curl tells us which sockets and
 * which timeout to watch, libevent tells curl when they are ready.  And
 * the stall timer of a call, with the curl callbacks that restart it.
 */
#include <sys/queue.h>
#include <sys/types.h>

#include <stdlib.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "lib/log.h"
#include "lib/util.h"
#include "turnworker/lm.h"
#include "turnworker/lm_int.h"

static void		 lm_action(struct lm *, curl_socket_t, int);
static void		 lm_reap(struct lm *);
static void		 lm_check(struct lm *);
static void		 lm_sock_ev(evutil_socket_t, short, void *);

static void
lm_action(struct lm *lm, curl_socket_t fd, int what)
{
	int	 running;

	lm->in_curl++;
	curl_multi_socket_action(lm->multi, fd, what, &running);
	lm->in_curl--;
	if (lm->dying) {
		lm_destroy(lm);
		return;
	}
	if (lm->ncancelled > 0)
		lm_reap(lm);
	lm_check(lm);
}

static void
lm_reap(struct lm *lm)
{
	struct lm_call	*call, *next;

	for (call = TAILQ_FIRST(&lm->calls); call != NULL; call = next) {
		next = TAILQ_NEXT(call, c_entry);
		if (call->cancelled && call->state != CALL_DELIVER)
			lm_call_free(call);
	}
	lm->ncancelled = 0;
}

static void
lm_check(struct lm *lm)
{
	struct lm_call	*call;
	CURLMsg		*msg;
	CURLcode	 rc;
	char		*p;
	int		 left;

	while ((msg = curl_multi_info_read(lm->multi, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		rc = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
		call = (struct lm_call *)p;
		lm_attempt_end(call);
		lm_attempt_done(call, rc);
	}
}

int
lm_sock_cb(CURL *easy, curl_socket_t fd, int what, void *arg, void *sockp)
{
	struct lm	*lm = arg;
	struct lm_sock	*s = sockp;
	short		 kind;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (s != NULL) {
			TAILQ_REMOVE(&lm->socks, s, s_entry);
			event_free(s->s_ev);
			free(s);
		}
		return (0);
	}
	if (s == NULL) {
		s = xcalloc(1, sizeof(*s));
		s->s_lm = lm;
		if ((s->s_ev = event_new(lm->base, -1, 0, NULL, NULL)) == NULL)
			fatalx("%s: event_new", __func__);
		TAILQ_INSERT_TAIL(&lm->socks, s, s_entry);
		curl_multi_assign(lm->multi, fd, s);
	}
	kind = EV_PERSIST;
	if (what & CURL_POLL_IN)
		kind |= EV_READ;
	if (what & CURL_POLL_OUT)
		kind |= EV_WRITE;
	event_del(s->s_ev);
	event_assign(s->s_ev, lm->base, fd, kind, lm_sock_ev, s);
	event_add(s->s_ev, NULL);
	return (0);
}

static void
lm_sock_ev(evutil_socket_t fd, short kind, void *arg)
{
	struct lm_sock	*s = arg;
	int		 what = 0;

	if (kind & EV_READ)
		what |= CURL_CSELECT_IN;
	if (kind & EV_WRITE)
		what |= CURL_CSELECT_OUT;
	lm_action(s->s_lm, fd, what);
}

int
lm_timer_cb(CURLM *multi, long ms, void *arg)
{
	struct lm	*lm = arg;

	(void)multi;
	if (ms < 0)
		evtimer_del(lm->timer);
	else
		timer_add_ms(lm->timer, ms);
	return (0);
}

void
lm_timer_ev(evutil_socket_t fd, short kind, void *arg)
{
	(void)fd;
	(void)kind;
	lm_action(arg, CURL_SOCKET_TIMEOUT, 0);
}

/*
 * No byte in either direction for stall_timeout_s once connected.  Our
 * own timer, as CURLOPT_LOW_SPEED_TIME averages over a window of several
 * seconds, in which the request body alone keeps a limit of 1 B/s met.
 */
void
lm_stall_ev(evutil_socket_t fd, short kind, void *arg)
{
	struct lm_call	*call = arg;

	(void)fd;
	(void)kind;
	if (call->state != CALL_RUNNING || call->easy == NULL)
		return;
	lm_call_fail(call, LM_ERR_TIMEOUT, "stalled: no data for %d s%s",
	    call->lm->stall_s, call->bodybytes > 0 ? " in the stream" : "");
	lm_attempt_end(call);
	lm_attempt_done(call, CURLE_OPERATION_TIMEDOUT);
}

void
lm_stall_reset(struct lm_call *call)
{
	timer_add_ms(call->stall, (int64_t)call->lm->stall_s * 1000);
}

/* Callbacks from curl, which is on the stack. */

/* Connected; the request is about to be sent. */
int
lm_prereq_cb(void *arg, char *ip, char *lip, int port, int lport)
{
	struct lm_call	*call = arg;

	(void)ip;
	(void)lip;
	(void)port;
	(void)lport;
	call->connected = 1;
	lm_stall_reset(call);
	return (CURL_PREREQFUNC_OK);
}

int
lm_xferinfo_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
	struct lm_call	*call = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	if (call->cancelled || call->lm->dying)
		return (1);
	if (ulnow != call->ulnow) {
		call->ulnow = ulnow;
		lm_stall_reset(call);
	}
	return (0);
}
