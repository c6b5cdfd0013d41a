/*
 * The worker's end of a sandboxed kernel: newline-delimited JSON
 * requests on its stdin, events from its stdout (kernel/fleet_kernel.py
 * documents the protocol).
 */
#ifndef FLEET_KERNEL_H
#define FLEET_KERNEL_H

#include <event2/event.h>
#include <jansson.h>

#define KERNEL_LINE_MAX		(32 * 1024 * 1024)

struct kernel;

struct kernel_ops {
	void	(*event)(struct kernel *, json_t *, void *);
	void	(*closed)(struct kernel *, const char *, void *);
};

struct kernel	*kernel_open(struct event_base *, int, int,
		    const struct kernel_ops *, void *);
int		 kernel_send(struct kernel *, json_t *);
void		 kernel_free(struct kernel *);

#endif
