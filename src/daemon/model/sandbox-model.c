/* SPDX-License-Identifier: Apache-2.0 */
#include "sandbox-model.h"

#include <string.h>

#include "util.h"

void kv_list_release(struct kv_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->keys[i]);
		free(l->values[i]);
	}
	free(l->keys);
	free(l->values);
	*l = (struct kv_list){0};
}

void kv_list_add(struct kv_list *l, const char *key, const char *value)
{
	l->keys = xrealloc(l->keys, (l->n + 1) * sizeof(*l->keys));
	l->values = xrealloc(l->values, (l->n + 1) * sizeof(*l->values));
	l->keys[l->n] = xstrdup(key);
	l->values[l->n] = xstrdup(value);
	l->n++;
}

bool sandbox_id_valid(const char *id)
{
	if (strlen(id) != 19 || strncmp(id, "sb-", 3) != 0)
		return false;
	for (size_t i = 3; i < 19; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

bool template_name_valid(const char *name)
{
	return name_valid(name, SANDBOX_TEMPLATE_NAME_MAX);
}

bool template_name_reserved(const char *name)
{
	return !strncmp(name, TEMPLATE_CACHE_PREFIX, strlen(TEMPLATE_CACHE_PREFIX));
}

bool env_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > ENV_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

bool secret_name_valid(const char *name)
{
	size_t n = strnlen(name, SECRET_NAME_MAX + 1);
	if (n == 0 || n > SECRET_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok =
		    (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '-' || c == '_' || c == '.'));
		if (!ok)
			return false;
	}
	return true;
}

void create_request_release(struct create_request *r)
{
	kv_list_release(&r->env);
	kv_list_release(&r->metadata);
	kv_list_release(&r->secrets);
	free(r->network_json);
	r->network_json = NULL;
}

void exec_request_release(struct exec_request *r)
{
	if (r->argv)
		for (size_t i = 0; i < r->argc; i++)
			free(r->argv[i]);
	free(r->argv);
	kv_list_release(&r->env);
	free(r->cwd);
	free(r->stdin_data);
	*r = (struct exec_request){0};
}
