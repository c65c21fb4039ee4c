-- Partitions by lease (issue 40): writers started without a fixed plan (no --partitions, no
-- kafka.assigned) share the topic's partitions through these two tables, in the conf's schema
-- like every other.
--
-- One row per partition of a topic. `owner` is the writer holding it (NULL: free), `epoch` goes up
-- by one at every claim, and `expires_at` (PostgreSQL's clock, never a writer's) is when the
-- lease ends unless renewed. Every batch of a leased partition checks, in its own transaction,
-- that the row still names its owner and epoch and has not expired: a writer that lost the
-- lease (dead, paused, cut off) can never commit again.
CREATE TABLE partition_leases (
    topic      text        NOT NULL,
    partition  int         NOT NULL,
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (topic, partition)
);

-- One row per live writer of a topic, renewed with its leases: the count of unexpired rows is
-- how many writers share the partitions (each aims at ceil(partitions / writers)).
CREATE TABLE writer_heartbeats (
    topic      text        NOT NULL,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (topic, owner)
);
