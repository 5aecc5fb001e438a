/* assets.h - the web UI and API documents built into ember-server.
 * The table is generated at build time by scripts/embed-assets.sh. */
#ifndef EMBER_ASSETS_H
#define EMBER_ASSETS_H

#include <stddef.h>

struct asset {
	const char *path;         /* URL path, e.g. "/index.html" */
	const char *content_type;
	const char *start;        /* bytes [start, end) */
	const char *end;
};

extern const struct asset ember_assets[];
extern const unsigned ember_asset_count;

/* The asset served at path ("/" serves "/index.html"), or NULL. */
const struct asset *asset_find(const char *path);

#endif
