-- fencedlock: the fenced key-value table of backend/postgres's KV (a
-- fencing.Store). NewKV runs it on first use unless SkipCreate is set; a
-- DBA may apply it instead, replacing the quoted name with the table's.
--
-- fence is the highest fencing token accepted for the key and holder the
-- holder id that presented it; every write applies the fencing rule to
-- them in the statement that writes value.
CREATE TABLE IF NOT EXISTS "fencedlock_kv" (
    key    bytea  PRIMARY KEY,
    value  bytea  NOT NULL,
    fence  bigint NOT NULL CHECK (fence > 0),
    holder text   NOT NULL
);
