//! The pure part of the leases: how many partitions a writer should hold, and what it does
//! about it this round. No I/O; [`super::store`] reads the facts and applies the change.

/// A writer's fair share of `partitions` among the live writers `live` (their ids, in one
/// order all writers agree on, this writer's among them at `rank`): `partitions / writers`,
/// one more for the first `partitions % writers` of them. The shares add up to every partition
/// exactly (no writer idle while another holds two more than it). A writer not among them yet
/// (its heartbeat not read back) counts as alone.
pub(super) fn fair_share(partitions: i32, writers: usize, rank: Option<usize>) -> usize {
    let partitions = partitions.max(0) as usize;
    let (writers, rank) = match rank {
        Some(r) if r < writers => (writers, r),
        _ => (1, 0),
    };
    partitions / writers + usize::from(rank < partitions % writers)
}

/// What a writer does with its leases in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// Claim up to this many free or expired partitions.
    Claim(usize),
    /// Release these partitions (above the fair share: another writer joined), after their
    /// writers finish the batch in flight.
    Release(Vec<i32>),
    /// Nothing to do.
    Keep,
}

/// The change that brings the partitions `held` (any order) to `share`: claim what is missing,
/// or release the highest-numbered surplus.
pub(super) fn change(held: &[i32], share: usize) -> Change {
    if held.len() < share {
        return Change::Claim(share - held.len());
    }
    if held.len() > share {
        let mut sorted = held.to_vec();
        sorted.sort_unstable();
        return Change::Release(sorted.split_off(share));
    }
    Change::Keep
}

/// The partitions of `held` a renewal did not return (expired or taken meanwhile), given the
/// (partition, epoch) pairs it returned: their writers must stop, they write under a dead epoch.
pub(super) fn lost(held: &[(i32, i64)], renewed: &[(i32, i64)]) -> Vec<i32> {
    held.iter().filter(|h| !renewed.contains(h)).map(|(p, _)| *p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_every_partition_and_differ_by_one_at_most() {
        assert_eq!(fair_share(12, 1, Some(0)), 12);
        assert_eq!((0..3).map(|r| fair_share(12, 3, Some(r))).collect::<Vec<_>>(), [4, 4, 4]);
        assert_eq!((0..3).map(|r| fair_share(4, 3, Some(r))).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!((0..5).map(|r| fair_share(12, 5, Some(r))).collect::<Vec<_>>(), [3, 3, 2, 2, 2]);
        assert_eq!(fair_share(2, 3, Some(2)), 0, "more writers than partitions: one idles");
        assert_eq!(fair_share(12, 3, None), 12, "its heartbeat not read back: alone");
        assert_eq!(fair_share(0, 3, Some(0)), 0);
        for writers in 1..=30 {
            for partitions in [1, 4, 12, 100] {
                let shares: Vec<usize> =
                    (0..writers).map(|r| fair_share(partitions, writers, Some(r))).collect();
                assert_eq!(shares.iter().sum::<usize>(), partitions as usize, "{partitions} over {writers}");
                assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn a_writer_claims_what_it_misses_and_releases_its_highest_surplus() {
        assert_eq!(change(&[], 4), Change::Claim(4));
        assert_eq!(change(&[3, 1], 4), Change::Claim(2));
        assert_eq!(change(&[0, 1, 2, 3], 4), Change::Keep);
        assert_eq!(change(&[7, 0, 11, 3, 5, 9], 4), Change::Release(vec![9, 11]));
        assert_eq!(change(&[2], 0), Change::Release(vec![2]));
    }

    #[test]
    fn a_lease_not_renewed_under_its_epoch_is_lost() {
        let held = [(0, 1), (1, 4), (2, 2)];
        assert_eq!(lost(&held, &[(0, 1), (1, 4), (2, 2)]), Vec::<i32>::new());
        assert_eq!(lost(&held, &[(0, 1)]), vec![1, 2]);
        assert_eq!(lost(&held, &[(0, 1), (1, 5), (2, 2)]), vec![1], "another epoch is another claim");
    }
}
