/*
 * One Recursive Language Model run: a root model writes Python, a
 * sandboxed kernel runs it, the code may ask a sub-model (llm_query,
 * llm_query_batched) or, one level deep, a child RLM (rlm_query), and
 * the run ends when the code calls SUBMIT(answer=...), or with one
 * extract call once max_iters steps are spent.
 */
#ifndef FLEET_RLM_H
#define FLEET_RLM_H

#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "lm.h"

#define RLM_REASKS		2	/* re-asks for a reply without code */
#define RLM_INTERRUPT_GRACE_MS	5000
#define RLM_STREAM_OUTPUT_MAX	(64 * 1024)

struct rlm;

struct rlm_params {
	const char	*root_model;
	const char	*sub_model;
	int		 root_max_tokens;
	int		 sub_max_tokens;
	int		 max_iters;
	int		 max_llm_calls;
	int		 max_output_chars;
	int64_t		 max_execution_output_bytes;
	int		 execution_timeout;	/* seconds, per cell */
	int		 depth;			/* 0 root, 1 child */
	int		 recursion;		/* rlm_query spawns children */
	int		 recursion_max_calls;
};

struct rlm_outcome {
	int		 ok;
	const char	*answer;	/* ok: the final answer */
	json_t		*outputs;	/* ok: SUBMIT's keyword arguments */
	const char	*message;	/* !ok: closed public message */
	const char	*code;		/* !ok: failure code for the Run */
	const char	*detail;	/* for the log */
};

struct rlm_ops {
	void	(*chunk)(json_t *, void *);	/* live chunks; may be NULL */
	void	(*part)(json_t *, void *);	/* committed parts; may be NULL */
	void	(*done)(struct rlm *, const struct rlm_outcome *, void *);
	/* rlm_query: start a child RLM, answer with rlm_child_answer. */
	void	(*child)(struct rlm *, int64_t, const char *, json_t *,
		    void *);
};

struct rlm	*rlm_new(struct event_base *, struct lm *, struct lm *, int, int,
		    const struct rlm_params *, const char *, json_t *,
		    const struct rlm_ops *, void *);
void		 rlm_start(struct rlm *);
void		 rlm_free(struct rlm *);
void		 rlm_child_answer(struct rlm *, int64_t, const char *,
		    const char *);
void		 rlm_add_usage(struct rlm *, const struct lm_usage *, int);
struct lm_usage	 rlm_usage(struct rlm *);
int		 rlm_iterations(struct rlm *);
int		 rlm_lm_calls(struct rlm *);
int		 rlm_sub_calls(struct rlm *);
void		 rlm_times(struct rlm *, int64_t *, int64_t *);

#endif
