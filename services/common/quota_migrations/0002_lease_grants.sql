-- Leases (services/common/quota.py): the tokens the last statement granted, written by the same
-- UPDATE that counts them, so the replica that asked learns its grant (RETURNING sees only the new
-- row). A replica of the previous version, counting one write per statement, ignores it.
ALTER TABLE write_windows ADD COLUMN last_grant integer NOT NULL DEFAULT 1;
