"""Every SQL statement Laneway runs, as named constants: `queries.NAME`, from one module per area.

Each constant is preceded by a comment listing its `$n` parameters. JSON goes in as text
(already validated and encoded by the engine) and is cast in SQL; it comes out decoded by the
codec registered in pool.py. SQL is never built from input. The functions some statements call
(the claim, the group commit, the event append) are in laneway/store/sql/functions.sql.

The areas: schema (the migration runner, the clock), queues, instances (reads and the API
side's enqueue), bulk (cancel, resume and retry, of one instance or many), leases (claims,
leases, runner writes, retention), operations (template operations and entity locks), events,
schedules, workers (the live process registry), history_rollup (the per-minute queue
history), waiting (why instances are not running), waits (signals and the wake-up of waits),
pages (keyset pages of instances), deploys (what is in flight, for the deploy preflight),
partitions (the event log's time partitions).
"""

from laneway.store.queries.bulk import (
    BULK_BATCH,
    BULK_MATCH,
    CANCEL_INSTANCES,
    RESUME_INSTANCES,
    RETRY_INSTANCES,
)
from laneway.store.queries.deploys import IN_FLIGHT_ACTIONS, IN_FLIGHT_SAMPLE
from laneway.store.queries.events import (
    APPEND_EVENTS,
    EVENTS_AFTER,
    INSTANCE_EVENTS_AFTER,
    LATEST_EVENT_ID,
    LATEST_INSTANCE_EVENTS,
)
from laneway.store.queries.history_rollup import (
    QUEUE_HISTORY,
    ROLL_UP_QUEUE_HISTORY,
)
from laneway.store.queries.instances import (
    COPIED_EVENT_COLUMNS,
    COPIED_INSTANCE_COLUMNS,
    ENQUEUE_INSTANCE,
    ENQUEUE_INSTANCE_WITHOUT_KEYS,
    ENQUEUE_INSTANCES,
    FIND_ACTIVE_SINGLETON,
    FIND_BY_IDEMPOTENCY_KEY,
    GET_INSTANCE,
    INSTANCE_COLUMNS,
    LIST_INSTANCE_SUMMARIES,
    LIST_INSTANCES,
    LOCK_EVENT_APPENDS,
    RING_AFTER_COPIED_EVENTS,
    UNREGISTERED_PENDING,
)
from laneway.store.queries.leases import (
    CLAIM,
    DUE_WORK,
    FAILURES_OF,
    NEXT_TOKEN_DUE,
    PRUNE_FINISHED,
    RECORD_FAILURES,
    RECOVER_EXPIRED_LEASES,
    RELEASE_INSTANCE_LOCKS,
    RELEASE_INSTANCES,
    RENEW_LEASES,
    WRITE_RUNNER_BATCH,
    WRITE_RUNNER_BATCH_AND_CLAIM,
)
from laneway.store.queries.operations import (
    ACQUIRE_LOCK,
    GET_LOCK,
    LIST_OPERATIONS,
    LIST_OPERATIONS_OF,
    RELEASE_LOCK,
)
from laneway.store.queries.pages import CUSTOM_PLANS_HERE, PAGE_INSTANCES
from laneway.store.queries.partitions import (
    ADD_EVENT_PARTITION,
    ANALYZE_EVENTS,
    ANALYZE_EVENTS_TIMEOUT,
    EVENT_PARTITIONS,
    EVENTS_STATISTICS_STALE,
    MISSING_EVENT_PARTITIONS,
    RETIRE_EVENT_PARTITION,
    RETIRING_EVENT_PARTITIONS,
    TRY_LOCK_PARTITIONS,
)
from laneway.store.queries.queues import (
    APPLY_CODE_QUEUE_SETTINGS,
    CONFIGURE_QUEUE,
    ENSURE_QUEUE,
    OLDEST_READY,
    QUEUE_STATS,
)
from laneway.store.queries.schedules import (
    ADVANCE_SCHEDULE,
    DELETE_SCHEDULE,
    GET_SCHEDULE,
    LIST_SCHEDULES,
    LOCK_DUE_SCHEDULES,
    SET_SCHEDULE_ENABLED,
    UPSERT_SCHEDULE,
)
from laneway.store.queries.schema import (
    APPLIED_MIGRATIONS,
    CREATE_MIGRATIONS_TABLE,
    DB_NOW,
    LOCK_MIGRATIONS,
    RECORD_MIGRATION,
    SCHEMA_VERSION,
    UNLOCK_MIGRATIONS,
)
from laneway.store.queries.waiting import WAITING_REASONS
from laneway.store.queries.waits import (
    CONSUME_SIGNALS,
    FIND_SIGNAL,
    INSERT_SIGNAL,
    LOCK_INSTANCE,
    NEXT_WAKE_IN,
    PAUSE_OF,
    WAKE_DUE,
)
from laneway.store.queries.workers import (
    HEARTBEAT_WORKER,
    LIVE_WORKERS,
    REMOVE_WORKER,
)

__all__ = [
    "ACQUIRE_LOCK",
    "ADD_EVENT_PARTITION",
    "ADVANCE_SCHEDULE",
    "ANALYZE_EVENTS",
    "ANALYZE_EVENTS_TIMEOUT",
    "APPEND_EVENTS",
    "APPLIED_MIGRATIONS",
    "APPLY_CODE_QUEUE_SETTINGS",
    "BULK_BATCH",
    "BULK_MATCH",
    "CANCEL_INSTANCES",
    "CLAIM",
    "CONFIGURE_QUEUE",
    "CONSUME_SIGNALS",
    "COPIED_EVENT_COLUMNS",
    "COPIED_INSTANCE_COLUMNS",
    "CREATE_MIGRATIONS_TABLE",
    "CUSTOM_PLANS_HERE",
    "DB_NOW",
    "DELETE_SCHEDULE",
    "DUE_WORK",
    "ENQUEUE_INSTANCE",
    "ENQUEUE_INSTANCES",
    "ENQUEUE_INSTANCE_WITHOUT_KEYS",
    "ENSURE_QUEUE",
    "EVENTS_AFTER",
    "EVENTS_STATISTICS_STALE",
    "EVENT_PARTITIONS",
    "FAILURES_OF",
    "FIND_ACTIVE_SINGLETON",
    "FIND_BY_IDEMPOTENCY_KEY",
    "FIND_SIGNAL",
    "GET_INSTANCE",
    "GET_LOCK",
    "GET_SCHEDULE",
    "HEARTBEAT_WORKER",
    "INSERT_SIGNAL",
    "INSTANCE_COLUMNS",
    "INSTANCE_EVENTS_AFTER",
    "IN_FLIGHT_ACTIONS",
    "IN_FLIGHT_SAMPLE",
    "LATEST_EVENT_ID",
    "LATEST_INSTANCE_EVENTS",
    "LIST_INSTANCES",
    "LIST_INSTANCE_SUMMARIES",
    "LIST_OPERATIONS",
    "LIST_OPERATIONS_OF",
    "LIST_SCHEDULES",
    "LIVE_WORKERS",
    "LOCK_DUE_SCHEDULES",
    "LOCK_EVENT_APPENDS",
    "LOCK_INSTANCE",
    "LOCK_MIGRATIONS",
    "MISSING_EVENT_PARTITIONS",
    "NEXT_TOKEN_DUE",
    "NEXT_WAKE_IN",
    "OLDEST_READY",
    "PAGE_INSTANCES",
    "PAUSE_OF",
    "PRUNE_FINISHED",
    "QUEUE_HISTORY",
    "QUEUE_STATS",
    "RECORD_FAILURES",
    "RECORD_MIGRATION",
    "RECOVER_EXPIRED_LEASES",
    "RELEASE_INSTANCES",
    "RELEASE_INSTANCE_LOCKS",
    "RELEASE_LOCK",
    "REMOVE_WORKER",
    "RENEW_LEASES",
    "RESUME_INSTANCES",
    "RETIRE_EVENT_PARTITION",
    "RETIRING_EVENT_PARTITIONS",
    "RETRY_INSTANCES",
    "RING_AFTER_COPIED_EVENTS",
    "ROLL_UP_QUEUE_HISTORY",
    "SCHEMA_VERSION",
    "SET_SCHEDULE_ENABLED",
    "TRY_LOCK_PARTITIONS",
    "UNLOCK_MIGRATIONS",
    "UNREGISTERED_PENDING",
    "UPSERT_SCHEDULE",
    "WAITING_REASONS",
    "WAKE_DUE",
    "WRITE_RUNNER_BATCH",
    "WRITE_RUNNER_BATCH_AND_CLAIM",
]
