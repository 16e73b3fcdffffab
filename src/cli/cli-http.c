/* SPDX-License-Identifier: Apache-2.0 */
/* Requests to airlockd with libcurl, over its unix socket or its TCP listener. */
#include "cli-http.h"

#include "cli-lines.h"

#include "util.h"

struct cli_conn cli_conn;

int cli_conn_set_host(const char *spec)
{
	const char *p = spec;
	if (!strncmp(p, "tcp://", 6))
		p += 6;
	const char *colon;
	cleanup_free char *host = NULL;
	if (*p == '[') {
		const char *end = strchr(p, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		host = xstrndup(p + 1, (size_t)(end - p - 1));
		colon = end + 1;
	} else {
		colon = strrchr(p, ':');
		if (!colon)
			return -EINVAL;
		host = xstrndup(p, (size_t)(colon - p));
	}
	long port;
	if (!*host || strlen(host) > 255 || strchr(host, '/') || parse_int_range(colon + 1, 1, 65535, &port) < 0)
		return -EINVAL;
	free(cli_conn.host);
	free(cli_conn.port);
	cli_conn.host = TAKE_PTR(host);
	cli_conn.port = xasprintf("%ld", port);
	return 0;
}

const char *cli_conn_describe(void)
{
	static __thread char buf[512]; /* airlock mcp --http calls from several threads */
	if (cli_conn.host)
		snprintf(buf, sizeof(buf), "tcp://%s%s%s:%s", strchr(cli_conn.host, ':') ? "[" : "", cli_conn.host,
		         strchr(cli_conn.host, ':') ? "]" : "", cli_conn.port);
	else
		snprintf(buf, sizeof(buf), "%s", cli_conn.socket_path);
	return buf;
}

struct sink {
	struct cli_req *req;
	CURL *curl;
	long status; /* 0 until the first byte of the body */
	char *data;  /* buffered body or the current line */
	size_t len, cap;
	size_t max;
	bool too_large;
	bool sink_failed;
	struct cli_lines lines; /* the 2xx body for on_line */
	struct al_error err;    /* what a sink that failed said, if anything */
};

static void sink_release(struct sink *s)
{
	free(s->data);
	cli_lines_release(&s->lines);
}

static void curl_cleanupp(CURL **c)
{
	if (*c)
		curl_easy_cleanup(*c);
}

static void slist_freep(struct curl_slist **l)
{
	curl_slist_free_all(*l);
}

static void sink_append(struct sink *s, const char *p, size_t n)
{
	if (s->len + n + 1 > s->cap) {
		s->cap = MAX(s->cap * 2, s->len + n + 1);
		s->data = xrealloc(s->data, s->cap);
	}
	memcpy(s->data + s->len, p, n);
	s->len += n;
	s->data[s->len] = '\0';
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb;
	if (s->status == 0)
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
	bool ok = s->status >= 200 && s->status < 300;
	if (ok && s->req->on_line) {
		if (cli_lines_feed(&s->lines, ptr, n, s->req->on_line, s->req->ud, &s->err) < 0) {
			s->sink_failed = true;
			return 0;
		}
		return n;
	}
	if (ok && s->req->on_bytes) {
		if (s->req->on_bytes(s->req->ud, ptr, n, &s->err) < 0) {
			s->sink_failed = true;
			return 0;
		}
		return n;
	}
	s->max = ok ? CLI_RESPONSE_MAX : CLI_ERROR_BODY_MAX;
	if (s->len + n > s->max) {
		s->too_large = true;
		return 0;
	}
	sink_append(s, ptr, n);
	return n;
}

/* The message a failed sink left, as the request's error; false if it left none. */
static bool sink_said(const struct sink *s, struct al_error *err)
{
	if (!s->err.message[0])
		return false;
	if (err)
		*err = s->err;
	return true;
}

static int describe_failure(CURLcode rc, const char *cerr, const struct sink *s, struct al_error *err)
{
	int errnum = s->sink_failed ? EPROTO : EIO;
	const char *where = cli_conn_describe();
	const char *why = cerr[0] ? cerr : curl_easy_strerror(rc);
	if (s->sink_failed && sink_said(s, err))
		return -errnum;
	if (s->too_large)
		return al_error_set(err, AL_ERR_TOO_LARGE, errnum, "the daemon's answer is larger than %zu bytes",
		                    s->max);
	if (rc == CURLE_COULDNT_CONNECT && cli_conn.host)
		return al_error_set(
		    err, AL_ERR_UNAVAILABLE, errnum,
		    "cannot reach airlockd at %s (%s). Is the daemon running with --listen? Point --host / "
		    "AIRLOCK_HOST at its TCP listener",
		    where, why);
	if (rc == CURLE_COULDNT_CONNECT)
		return al_error_set(err, AL_ERR_UNAVAILABLE, errnum,
		                    "cannot reach airlockd at %s (%s). Is the daemon running? Start it with "
		                    "'airlockd --socket %s', or point --socket / AIRLOCK_SOCKET at its socket",
		                    where, why, where);
	return al_error_set(err, AL_ERR_UNAVAILABLE, errnum, "request to airlockd at %s failed: %s", where, why);
}

int cli_request(struct cli_req *req, long *ret_status, json_t **ret_body, struct al_error *err)
{
	__attribute__((cleanup(curl_cleanupp))) CURL *c = curl_easy_init();
	if (!c)
		abort();
	cleanup_free char *url = NULL;
	if (cli_conn.host)
		url = xasprintf("http://%s%s%s:%s%s", strchr(cli_conn.host, ':') ? "[" : "", cli_conn.host,
		                strchr(cli_conn.host, ':') ? "]" : "", cli_conn.port, req->path);
	else
		url = xasprintf("http://airlockd%s", req->path);
	cleanup_free char *payload = req->json ? json_dumps(req->json, JSON_COMPACT) : NULL;
	cleanup_free char *auth = cli_conn.token ? xasprintf("Authorization: Bearer %s", cli_conn.token) : NULL;
	cleanup_free char *ctype = NULL;
	__attribute__((cleanup(sink_release))) struct sink s = {.req = req, .curl = c};
	__attribute__((cleanup(slist_freep))) struct curl_slist *headers = NULL;
	char cerr[CURL_ERROR_SIZE] = "";
	if (!cli_conn.host)
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, cli_conn.socket_path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	if (getenv("AIRLOCK_DEBUG_HTTP"))
		curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
	headers = curl_slist_append(headers, "Expect:");
	if (auth)
		headers = curl_slist_append(headers, auth);
	if (payload) {
		headers = curl_slist_append(headers, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
	} else if (req->raw || req->reader) {
		ctype =
		    xasprintf("Content-Type: %s", req->content_type ? req->content_type : "application/octet-stream");
		headers = curl_slist_append(headers, ctype);
		if (req->reader) {
			headers = curl_slist_append(headers, "Transfer-Encoding: chunked");
			curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(c, CURLOPT_READFUNCTION, req->reader);
			curl_easy_setopt(c, CURLOPT_READDATA, req->reader_data);
		} else {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->raw);
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->raw_len);
		}
	}
	/* After UPLOAD, which would make it a PUT. */
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	CURLcode rc = curl_easy_perform(c);
	if (rc != CURLE_OK)
		return describe_failure(rc, cerr, &s, err);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, ret_status);
	bool streamed = *ret_status >= 200 && *ret_status < 300 && (req->on_line || req->on_bytes);
	*ret_body = NULL;
	if (streamed && req->on_line && cli_lines_finish(&s.lines, req->on_line, req->ud, &s.err) < 0)
		return sink_said(&s, err) ? -EPROTO : al_error_set(err, AL_ERR_INTERNAL, EPROTO, "bad last line");
	if (!streamed && s.len > 0) {
		json_error_t jerr;
		*ret_body = json_loadb(s.data, s.len, 0, &jerr);
		if (!*ret_body)
			return al_error_set(err, AL_ERR_INTERNAL, EBADMSG,
			                    "airlockd sent an answer that is not JSON (HTTP %ld): %s", *ret_status,
			                    jerr.text);
	}
	return 0;
}

int cli_http(const char *method, const char *path, json_t *body, long *ret_status, json_t **ret_body,
             struct al_error *err)
{
	struct cli_req req = {.method = method, .path = path, .json = body};
	return cli_request(&req, ret_status, ret_body, err);
}
