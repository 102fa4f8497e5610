-- laneway.queues.settings_source: where a queue's caps came from (issue #18, point 6).
--
-- 'default'  nobody set them: the column defaults of 0001 (concurrency 100, no rate cap);
-- 'code'     a template's queue_settings, written by an engine at start
--            (queries.APPLY_CODE_QUEUE_SETTINGS);
-- 'operator' configureQueue or Engine.configure_queue (queries.CONFIGURE_QUEUE).
--
-- The rule: code declares defaults. An engine's start writes them only where the source is not
-- 'operator' (in the same statement that checks it), so an operator's settings survive every
-- restart, and a changed code default still reaches a queue whose settings came from code.
--
-- Existing rows: whether their caps were set by an operator or re-applied from code cannot be
-- told from the table, so every existing queue starts as 'default'. The next engine start
-- applies its templates' queue_settings to them, as every start did before this migration; an
-- operator who wants settings kept sets them once more with configureQueue.

ALTER TABLE laneway.queues
    ADD COLUMN settings_source text NOT NULL DEFAULT 'default'
        CHECK (settings_source IN ('default', 'code', 'operator'));
