/* slack.h - Slack notifications through an incoming webhook: new or
 * worsened recommendations (server/query/recommend.h, as its listener)
 * and GPU XID events (points of hw.gpu.xid in the metrics store,
 * server/metrics/metrics.h, polled every few seconds).
 *
 * Rate limit: at most max_messages messages per window_ms (5 per 10
 * minutes by default); what arrives while none is left waits and goes
 * out coalesced: one message lists everything pending (the first
 * SLACK_MAX_LISTED, then a count). At most SLACK_MAX_PENDING items wait;
 * more are only counted. A message that fails is retried with the next
 * one (it used its slot).
 *
 * Payload: {"text": summary, "blocks": [header, one section per item
 * with a link back to the UI (public_url), context]} (Slack's Block
 * Kit, mrkdwn escaped). The webhook URL is a secret: it is never logged,
 * nor is anything libcurl says about it (only its error code's words and
 * the HTTP status).
 *
 * XIDs: the points of the last SLACK_XID_LOOKBACK_MS (late arrivals
 * included) not told yet; those older than the notifier's start are not
 * told (a restart does not repeat them).
 *
 * Threading: one thread of its own; slack_recs_event may be called from
 * any thread.
 */
#ifndef EMBER_SERVER_SLACK_H
#define EMBER_SERVER_SLACK_H

#include <stdint.h>

#include "buf.h"
#include "server/metrics/metrics.h"
#include "server/query/recommend.h"

#define SLACK_MAX_PENDING 200
#define SLACK_MAX_LISTED 10
#define SLACK_XID_LOOKBACK_MS (15 * 60 * 1000LL)
#define SLACK_XID_POLL_MS 2000

struct slack_config {
	const char *webhook_url;  /* read from --slack-webhook-url-file */
	const char *public_url;   /* the UI's address, for links: "http://host:port" */
	unsigned max_messages;    /* per window (--slack-max-messages, 5) */
	int64_t window_ms;        /* --slack-rate-window, 10 min */
};

struct slack;

/* Starts the notifier (metrics may be NULL: no XIDs). libcurl must be
 * initialised (curl_global_init). NULL with err set. */
struct slack *slack_start(const struct slack_config *c, struct metrics_store *metrics, struct buf *err);
/* Stops it; what is pending is not sent. NULL is ignored. */
void slack_stop(struct slack *s);
/* A recs_set_listener listener (ctx: the struct slack). */
void slack_recs_event(void *ctx, const struct recs_event *ev);

/* Reads a webhook URL from path (one line, at most 2 KiB, http:// or
 * https://) into out. 0, or -1 with err (which never holds the URL). */
int slack_read_url(const char *path, struct buf *out, struct buf *err);

#endif
