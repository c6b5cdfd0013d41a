/*
 * What the root model reads: the instructions, the variables (type,
 * length, and a bounded preview, never the input itself), the REPL
 * history with each output cut to a budget, and the step counter.
 */
#ifndef FLEET_PROMPT_H
#define FLEET_PROMPT_H

#include <stddef.h>

#include <jansson.h>

#define PREVIEW_HEAD	500
#define PREVIEW_TAIL	500

struct prompt_env {
	int	 max_iters;
	int	 max_llm_calls;
	int	 max_output_chars;
	int	 recursion;	/* rlm_query may spawn a child */
	int	 child;		/* this is a child RLM */
};

char	*prompt_variables(json_t *);
char	*prompt_system(const struct prompt_env *);
char	*prompt_user(const char *, const char *, int, int);
char	*prompt_extract_system(void);
char	*prompt_cut(const char *, size_t, size_t);
int	 prompt_code(const char *, char **, char **);
char	*prompt_history_entry(int, const char *, const char *, const char *,
	    size_t);

#endif
