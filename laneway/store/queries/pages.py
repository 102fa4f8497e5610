"""Keyset pages of instances: the statement behind workflowInstancesConnection.

See laneway/store/queries/__init__.py for how statements are written, and
migrations/0020_instance_pages.sql for the indexes the walk reads.
"""

from laneway.store.queries.instances import (
    _SUMMARY_COLUMNS,
    _SUMMARY_COLUMNS_WITHOUT_PAYLOADS,
    INSTANCE_FILTER,
)

# The largest uuid: with 'infinity', the start key before every row (a walk from the newest).
_LAST_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

# (no parameters) Inside a transaction: its statements are planned for their values every time,
# never with a generic plan (store/pages.py says why).
CUSTOM_PLANS_HERE = "SET LOCAL plan_cache_mode = force_custom_plan"

# INSTANCE_FILTER's $1 ... $8; $9 and $10 the start key (created_at, instance_id): the page is
# the rows after it in (created_at, instance_id) descending order, both NULL for the first
# page; $11 the number of rows. As summaries (queries.LIST_INSTANCE_SUMMARIES).
# Run only with custom plans (store/pages.py says why): planned for its values, the filter's
# `$n IS NULL OR ...` terms fold away, so the start key, a name and the creation window's lower
# bound are index conditions of instances_page or instances_name_page, and the walk stops at
# the page's last row. The caller folds the window's upper bound ($8) into the start key.
_PAGE_INSTANCES = f"""
SELECT {{columns}}
  FROM laneway.instances
 WHERE {INSTANCE_FILTER}
   AND (created_at, instance_id) < (COALESCE($9::timestamptz, 'infinity'),
                                    COALESCE($10::uuid, '{_LAST_UUID}'))
 ORDER BY created_at DESC, instance_id DESC
 LIMIT $11
"""
PAGE_INSTANCES = _PAGE_INSTANCES.format(columns=_SUMMARY_COLUMNS)
# The same page without `params`, `result` and `wait` (queries.LIST_INSTANCE_SUMMARIES_WITHOUT_PAYLOADS).
PAGE_INSTANCES_WITHOUT_PAYLOADS = _PAGE_INSTANCES.format(columns=_SUMMARY_COLUMNS_WITHOUT_PAYLOADS)
