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
