-- fencedlock: the PostgreSQL schema of backend/postgres (PostgreSQL 13 or later).
--
-- The backend runs this file itself on first use (CREATE TABLE IF NOT
-- EXISTS) unless Options.SkipCreate is set; a DBA may apply it instead as a
-- migration. With table names other than the defaults, replace the two
-- quoted names below (the backend does the same replacement).
--
-- Keys are bytea: a lock key is any 1 to 1024 bytes, NUL and invalid UTF-8
-- included, which a text column would refuse.

-- One row per lock key. owner is the SHA-256 of the holder's owner token
-- (never the token), NULL while the key is free; expires_at is server time
-- (clock_timestamp() when the lease was granted or renewed, plus the TTL):
-- expiry is judged by the server's clock only. fence is the last fence
-- granted on the key. Releases keep the row, so the fence stays.
-- wake_until is set by waiters that LISTEN for the key's release
-- (NewListening, NewFair with a notifier) and refreshed while they wait:
-- a release NOTIFYs only while it is in the future, because a transaction
-- that NOTIFYs takes a cluster-wide lock at commit (commits of releases
-- would otherwise queue behind each other when nobody listens).
CREATE TABLE IF NOT EXISTS "fencedlock_leases" (
    key        bytea       PRIMARY KEY,
    owner      bytea,
    fence      bigint      NOT NULL CHECK (fence >= 0),
    expires_at timestamptz,
    wake_until timestamptz
);
-- A table created before wake_until existed gains it on the backend's
-- first use; with SkipCreate, apply this once:
--   ALTER TABLE "fencedlock_leases" ADD COLUMN IF NOT EXISTS wake_until timestamptz;

-- The fence counter of every key ever granted, written in the same
-- statement as the lease row and never deleted by the backend. A new fence
-- is one more than the greater of the two rows' fences, so a TRUNCATE (or
-- DELETE) of either table alone does not bring fences back; losing both
-- rows of a key does.
CREATE TABLE IF NOT EXISTS "fencedlock_fences" (
    key   bytea  PRIMARY KEY,
    fence bigint NOT NULL CHECK (fence >= 0)
);
