/* SPDX-License-Identifier: Apache-2.0 */
#include "cli-http.h"

#include <curl/curl.h>

#include "util.h"

struct buf {
	char *data;
	size_t len;
	bool too_large;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct buf *b = userdata;
	size_t n = size * nmemb;
	if (b->len + n > CLI_RESPONSE_MAX) {
		b->too_large = true;
		return 0;
	}
	b->data = xrealloc(b->data, b->len + n + 1);
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

int cli_http(const char *socket_path, const char *method, const char *path, json_t *body, long *ret_status,
	     json_t **ret_body, char *errbuf, size_t errbuf_size)
{
	CURL *c = curl_easy_init();
	if (!c)
		abort();
	cleanup_free char *url = xasprintf("http://airlockd%s", path);
	cleanup_free char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct buf b = {0};
	struct curl_slist *headers = NULL;
	char cerr[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (payload) {
		headers = curl_slist_append(headers, "Content-Type: application/json");
		headers = curl_slist_append(headers, "Expect:");
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
	}
	CURLcode rc = curl_easy_perform(c);
	int r = 0;
	if (rc != CURLE_OK) {
		if (b.too_large)
			snprintf(errbuf, errbuf_size, "the daemon's answer is larger than %u bytes", CLI_RESPONSE_MAX);
		else if (rc == CURLE_COULDNT_CONNECT)
			snprintf(errbuf, errbuf_size,
				 "cannot reach airlockd at %s (%s). Is the daemon running? Start it with "
				 "'airlockd --socket %s', or point --socket / AIRLOCK_SOCKET at its socket",
				 socket_path, cerr[0] ? cerr : curl_easy_strerror(rc), socket_path);
		else
			snprintf(errbuf, errbuf_size, "request to airlockd at %s failed: %s", socket_path,
				 cerr[0] ? cerr : curl_easy_strerror(rc));
		r = -EIO;
	} else {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, ret_status);
		*ret_body = NULL;
		if (b.len > 0) {
			json_error_t jerr;
			*ret_body = json_loadb(b.data, b.len, 0, &jerr);
			if (!*ret_body) {
				snprintf(errbuf, errbuf_size, "airlockd sent an answer that is not JSON: %s", jerr.text);
				r = -EBADMSG;
			}
		}
	}
	curl_slist_free_all(headers);
	curl_easy_cleanup(c);
	free(b.data);
	return r;
}
