-- fencedlock: the waiters' queue of backend/postgres's Fair backend
-- (FIFO waiters). NewFair runs it on first use unless SkipCreate is set; a
-- DBA may apply it instead, replacing the quoted name with the table's.
--
-- One row per waiting owner of a key (owner is the SHA-256 of its token);
-- seq orders the waiters by arrival; a waiter refreshes expires_at (server
-- time) while it waits, and a row not refreshed for a while is skipped.
CREATE TABLE IF NOT EXISTS "fencedlock_waiters" (
    key        bytea       NOT NULL,
    owner      bytea       NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
