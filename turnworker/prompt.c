#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "lib/utf8.h"
#include "prompt.h"

/*
 * s cut to at most max characters (bytes, on UTF-8 boundaries): its
 * head and tail, with the cut counted.  Always a new string.
 */
char *
prompt_cut(const char *s, size_t len, size_t max)
{
	size_t	 h, ts;
	char	*out;

	if (len <= max)
		return xstrndup(s, len);
	h = utf8_floor(s, max / 2);
	ts = utf8_ceil(s, len, len - max / 2);
	xasprintf(&out, "%.*s\n\n... (%zu characters omitted) ...\n\n%.*s",
	    (int)h, s, ts - h, (int)(len - ts), s + ts);
	return out;
}

static void
preview(struct evbuffer *b, const char *s, size_t len)
{
	size_t	 h, ts;

	if (len <= PREVIEW_HEAD + PREVIEW_TAIL) {
		evbuffer_add(b, s, len);
		return;
	}
	h = utf8_floor(s, PREVIEW_HEAD);
	ts = utf8_ceil(s, len, len - PREVIEW_TAIL);
	evbuffer_add(b, s, h);
	evbuffer_add_printf(b, "\n...\n");
	evbuffer_add(b, s + ts, len - ts);
}

/*
 * One block per variable of vars (an object name -> value): its type,
 * length and preview.  The size of this text does not grow with the
 * input's.
 */
char *
prompt_variables(json_t *vars)
{
	struct evbuffer	*b = evbuffer_new();
	const char	*name, *type;
	json_t		*v;
	char		*text;
	size_t		 len;

	json_object_foreach(vars, name, v) {
		if (json_is_string(v)) {
			type = "str";
			text = xstrndup(json_string_value(v),
			    json_string_length(v));
			len = json_string_length(v);
		} else {
			type = json_is_array(v) ? "list" : json_is_object(v) ?
			    "dict" : "value";
			text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			len = strlen(text);
		}
		evbuffer_add_printf(b, "Variable: `%s` (access it in your "
		    "code)\nType: %s\nTotal length: %zu characters\n"
		    "Preview:\n```\n", name, type, len);
		preview(b, text, len);
		evbuffer_add_printf(b, "\n```\n\n");
		free(text);
	}
	text = buf_take(b);
	evbuffer_free(b);
	return text;
}

char *
prompt_system(const struct prompt_env *pe)
{
	char	*s;

	xasprintf(&s,
"You are a Recursive Language Model (RLM). You answer a query by writing "
"Python code that runs in a persistent REPL. The input is not in this "
"prompt: it is in REPL variables, described to you with their type, "
"length and a short preview.\n"
"\n"
"In the REPL you have:\n"
"- the input variables: `query` (the request), `context` (the text to "
"work on) and `attachments` (a list of files under /workspace, each with "
"name, path, size and sha256);\n"
"- llm_query(prompt: str) -> str: one question to a sub-model, which has "
"no REPL; use it for semantic judgments on slices of the input;\n"
"- llm_query_batched(prompts: list[str]) -> list[str]: independent "
"questions asked concurrently, answers in the same order;\n"
"%s"
"- print(): the only way to see a value; each step's output is shown to "
"you cut to %d characters;\n"
"- SUBMIT(answer=...): ends the run with the final answer.\n"
"\n"
"Rules:\n"
"1. Explore first: print types, lengths and small samples; never print "
"the whole input.\n"
"2. Work in small steps; variables persist between steps.\n"
"3. Compute figures exactly in Python; use llm_query for meaning and "
"string operations for finding things.\n"
"4. Verify before you submit. SUBMIT ends the run at once: inspect a "
"result in one step and submit it in a later one.\n"
"5. You have at most %d sub-model calls (each prompt of a batch counts) "
"and %d steps.\n"
"\n"
"Reply each time with your reasoning, then exactly one ```python code "
"block.\n",
	    pe->recursion ? "- rlm_query(task: str, context=None) -> str: "
	    "hand a self-contained subproblem to a child RLM with its own REPL; "
	    "pass only the slice it needs;\n" : "",
	    pe->max_output_chars, pe->max_llm_calls, pe->max_iters);
	return s;
}

char *
prompt_user(const char *variables, const char *history, int step, int max)
{
	char	*s;

	xasprintf(&s, "Variables:\n\n%s\nREPL history:\n\n%s\n\nStep %d of "
	    "%d. Write the next code block.", variables,
	    history[0] ? history : "You have not interacted with the REPL "
	    "yet.", step, max);
	return s;
}

char *
prompt_extract_system(void)
{
	return xstrdup(
"You are finishing a Recursive Language Model run that used all its steps. "
"Based on the variables and the REPL history below, give the final answer "
"to the query now. Reply with the answer only: no code, no preamble.");
}

/*
 * Find the code block of a reply: the first ``` fence tagged python, py
 * or repl (or untagged).  Returns 1 with *code and *reasoning (the text
 * around it) allocated, 0 when there is none.
 */
int
prompt_code(const char *reply, char **code, char **reasoning)
{
	const char	*p = reply, *start, *body, *end, *nl;
	size_t		 taglen;

	while ((start = strstr(p, "```")) != NULL) {
		if ((nl = strchr(start + 3, '\n')) == NULL)
			return 0;
		taglen = nl - (start + 3);
		while (taglen > 0 && (start[3 + taglen - 1] == ' ' ||
		    start[3 + taglen - 1] == '\r'))
			taglen--;
		p = nl + 1;
		if (taglen != 0 &&
		    !(taglen == 6 && strncmp(start + 3, "python", 6) == 0) &&
		    !(taglen == 2 && strncmp(start + 3, "py", 2) == 0) &&
		    !(taglen == 4 && strncmp(start + 3, "repl", 4) == 0) &&
		    !(taglen == 7 && strncmp(start + 3, "python3", 7) == 0)) {
			/* Another language: skip past its closing fence. */
			if ((end = strstr(p, "```")) == NULL)
				return 0;
			p = end + 3;
			continue;
		}
		body = nl + 1;
		if ((end = strstr(body, "```")) == NULL)
			end = body + strlen(body);	/* unclosed: to the end */
		*code = xstrndup(body, end - body);
		xasprintf(reasoning, "%.*s%s", (int)(start - reply), reply,
		    *end ? end + 3 : "");
		return 1;
	}
	return 0;
}

char *
prompt_history_entry(int step, const char *reasoning, const char *code,
    const char *output, size_t max_output)
{
	char	*cut, *cutr, *s;
	size_t	 len = strlen(output);

	cut = prompt_cut(output, len, max_output);
	cutr = prompt_cut(reasoning, strlen(reasoning), max_output);
	xasprintf(&s, "=== Step %d ===\nReasoning: %s\nCode:\n```python\n%s\n"
	    "```\nOutput (%zu chars):\n%s\n\n", step, cutr, code, len, cut);
	free(cut);
	free(cutr);
	return s;
}
