/*
 * The UI message stream chunks a Turn emits (fleet-rlm's projection of
 * its runtime events), and the committed parts they are replayed from.
 */
#ifndef FLEET_CHUNKS_H
#define FLEET_CHUNKS_H

#include <jansson.h>

typedef void	(*chunk_emit)(json_t *, void *);

json_t	*chunk_start(const char *, const char *, const char *, const char *);
json_t	*chunk_type(const char *);
json_t	*chunk_id(const char *, const char *);
json_t	*chunk_delta(const char *, const char *, const char *);
json_t	*chunk_data(const char *, const char *, json_t *);
json_t	*chunk_finish(const char *, json_t *);
json_t	*chunk_error(const char *);
json_t	*chunk_abort(const char *);

void	 chunks_project(json_t *, const char *, chunk_emit, void *);

#endif
