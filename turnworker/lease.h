/*
 * The worker's side of a sandbox lease: one connection to the lease
 * manager per lease, renewed while held; closing it ends the lease.
 */
#ifndef FLEET_LEASE_H
#define FLEET_LEASE_H

#include <stdint.h>

#include <event2/event.h>

struct lease_client;

struct lease_ops {
	/* The kernel's stdin and stdout are the callee's to close. */
	void	(*granted)(struct lease_client *, int, int, int64_t, void *);
	void	(*refused)(struct lease_client *, const char *, const char *,
		    void *);
	/* The lease ended without our asking (revoked, manager gone). */
	void	(*lost)(struct lease_client *, void *);
};

struct lease_client	*lease_acquire(struct event_base *, const char *,
			    const char *, const char *, int64_t,
			    const struct lease_ops *, void *);
void			 lease_release(struct lease_client *);
const char		*lease_id(struct lease_client *);

#endif
