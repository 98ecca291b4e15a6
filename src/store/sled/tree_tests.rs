//! The tree under the embedded store (`vendor/sled`, whose writes build the changed leaf
//! in place, and whose indexes hold at most 64 children): keys written in any order, written
//! again and removed, read back as a map holds them, in order, before and after the database
//! is opened again.

use std::collections::BTreeMap;

/// A key of 1 to 40 bytes from a small alphabet, so keys repeat (writes again) and both
/// inline (short) and shared (long) keys occur.
fn key(rng: &mut fastrand::Rng) -> Vec<u8> {
    let len = rng.usize(1..=40);
    (0..len).map(|_| b'a' + rng.u8(0..3)).collect()
}

/// Asserts that `tree` holds exactly what `model` does, in key order.
fn same(tree: &sled::Tree, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
    let stored: Vec<(Vec<u8>, Vec<u8>)> = tree
        .iter()
        .map(|entry| {
            let (k, v) = entry.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(stored.len(), expected.len(), "{when}: how many");
    assert!(stored == expected, "{when}: the tree differs from the map");
    for (k, v) in model.iter().take(50) {
        assert_eq!(
            tree.get(k).unwrap().as_deref(),
            Some(v.as_slice()),
            "{when}"
        );
    }
}

#[test]
fn writes_in_any_order_read_back_as_a_map_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut model = BTreeMap::new();
    {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        for step in 0..6000 {
            let k = key(&mut rng);
            if rng.u8(0..10) == 0 {
                tree.remove(&k).unwrap();
                model.remove(&k);
            } else {
                let v = vec![rng.u8(..); rng.usize(0..64)];
                tree.insert(k.as_slice(), v.as_slice()).unwrap();
                model.insert(k, v);
            }
            if step % 1000 == 999 {
                same(&tree, &model, &format!("after {} writes", step + 1));
            }
        }
        // Ascending keys, as a run's events come: enough leaves that the index above them
        // splits too (64 children at the most).
        for n in 0u32..20_000 {
            let k = [b"z".as_slice(), &n.to_be_bytes()].concat();
            tree.insert(k.as_slice(), &n.to_le_bytes()).unwrap();
            model.insert(k, n.to_le_bytes().to_vec());
        }
        same(&tree, &model, "after the ascending writes");
        // Most removed again, so leaves and indexes shrink and merge.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for k in keys {
            if rng.u8(0..10) != 0 {
                tree.remove(&k).unwrap();
                model.remove(&k);
            }
        }
        same(&tree, &model, "after most were removed");
        db.flush().unwrap();
    }
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    same(&db.open_tree("t").unwrap(), &model, "opened again");
}

/// The log's file holds zeros past the segment being written, so that a flush writes into
/// blocks the filesystem has already allocated (no journal commit in its `fdatasync`); a
/// database whose file ends in such segments opens with every flushed write, and goes on,
/// through values written over again (old segments freed, the file cut back and grown).
#[test]
fn the_log_is_zeroed_ahead_and_opens_again_with_every_write() {
    const SEGMENT: u64 = 512 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("db");
    let mut model = BTreeMap::new();
    let write = |tree: &sled::Tree,
                 model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
                 from: u32,
                 to: u32,
                 round: u32| {
        for n in from..to {
            let k = n.to_be_bytes().to_vec();
            let v = vec![((n + round) % 251) as u8; 1024];
            tree.insert(k.as_slice(), v.as_slice()).unwrap();
            model.insert(k, v);
            if n % 100 == 99 {
                tree.flush().unwrap();
            }
        }
    };
    {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        write(&tree, &mut model, 0, 3000, 0);
        // the zeroing runs on sled's I/O pool: wait for the file to reach two zeroed
        // segments past the data.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let bytes = std::fs::read(&log).unwrap();
            let len = bytes.len() as u64;
            let tail_zeroed = len >= 3 * SEGMENT
                && len % SEGMENT == 0
                && bytes[(len - 2 * SEGMENT) as usize..]
                    .iter()
                    .all(|b| *b == 0);
            if tail_zeroed {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the file ends {len} bytes in, without two zeroed segments"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        same(&tree, &model, "written");
    }
    {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        same(&tree, &model, "opened again");
        write(&tree, &mut model, 3000, 5000, 0);
        for round in 1..4 {
            write(&tree, &mut model, 0, 5000, round);
        }
        same(&tree, &model, "written over after opening again");
    }
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    same(&db.open_tree("t").unwrap(), &model, "opened a third time");
}
