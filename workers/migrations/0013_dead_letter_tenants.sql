-- Dead letters belong to tenants (issue 31): each letter records the tenant proven when it
-- was kept, and answers only to that tenant's principals; NULL means no tenant is proven to
-- own it (an unsigned or forged command, a malformed message) and only the fleet_operator
-- role sees it (saga_core.authority.answers_to). workers.letter_tenants decides the tenant
-- of each new letter; this migration derives what it can for the letters already kept.
ALTER TABLE fleet.dead_letters
    ADD COLUMN tenant text CONSTRAINT dead_letters_tenant_not_blank CHECK (tenant <> '');

-- A signed command whose signature verified: every refusal below is given only after the
-- signature held (saga_core.signed_commands: verify first, then the envelope, the window,
-- single use and the roles), and a command with no refusal failed after it was accepted
-- (kwargs only, so its positional arguments are an empty list). Its tenant is the tenant of
-- the key that signed it. An unsigned, forged, unknown-key or identity-naming command, or
-- one refused before its signature was looked at (oversized, positional arguments), stays
-- unknown.
UPDATE fleet.dead_letters d
   SET tenant = k.tenant
  FROM fleet.signing_keys k
 WHERE d.tenant IS NULL
   AND d.task <> 'sagafleet.step'
   AND d.message IS NOT NULL
   AND jsonb_typeof(d.message -> 'kwargs') = 'object'
   AND k.kid = d.message -> 'kwargs' ->> 'kid'
   AND (d.refusal IN ('malformed_envelope', 'wrong_task', 'not_yet_valid', 'expired',
                      'lifetime_too_long', 'replayed', 'not_permitted')
        OR (d.refusal IS NULL AND d.message -> 'args' = '[]'::jsonb));

-- A malformed step message that still names an existing saga first: the saga's tenant, as
-- its stream's first event records it.
UPDATE fleet.dead_letters d
   SET tenant = e.tenant_id
  FROM eventstore.events e
 WHERE d.tenant IS NULL
   AND d.task = 'sagafleet.step'
   AND d.message IS NOT NULL
   AND jsonb_typeof(d.message -> 'args') = 'array'
   AND jsonb_typeof(d.message -> 'args' -> 0) = 'string'
   AND e.stream_id = 'saga-' || (d.message -> 'args' ->> 0)
   AND e.stream_version = 1
   AND e.tenant_id <> '';

-- One tenant's open letters, oldest first (the list every surface shows); NULL tenants are
-- indexed too (btree keeps them), so the fleet operator's list is a range scan as well.
CREATE INDEX dead_letters_tenant_open_idx
    ON fleet.dead_letters (tenant, id) WHERE status = 'open';
