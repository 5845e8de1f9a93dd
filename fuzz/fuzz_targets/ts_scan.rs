//! Fuzzes the MPEG-TS scanner: any bytes, pushed in two chunks split anywhere, give a clean
//! error or an index whose payload units are well-formed: 1..=7 packets each, covering every
//! whole packet once in order, never holding a PAT packet after their first, first unit a seek
//! point, send times non-decreasing and equal to `send_time` of their first packet.
#![no_main]

use isochron_media::{MAX_TS_PER_UNIT, TS_PACKET_SIZE, TsScanner};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b).min(data.len()));
    let mut scanner = TsScanner::new();
    if scanner.push(&data[..split]).is_err() || scanner.push(&data[split..]).is_err() {
        return;
    }
    let Ok(index) = scanner.finish() else {
        return;
    };
    assert_eq!(index.packet_count(), (data.len() / TS_PACKET_SIZE) as u64);
    assert_eq!(index.trailing_bytes(), (data.len() % TS_PACKET_SIZE) as u64);

    let mut next_packet = 0u64;
    let mut units = 0u64;
    let mut last_time = None;
    for (i, unit) in index.units().enumerate() {
        assert_eq!(unit.first_packet, next_packet, "unit {i} is not contiguous");
        assert!((1..=MAX_TS_PER_UNIT).contains(&unit.ts_packets), "unit {i}: {unit:?}");
        if i == 0 {
            assert!(unit.random_access, "the first unit is always a seek point");
        }
        for p in unit.packets().skip(1) {
            let at = p as usize * TS_PACKET_SIZE;
            let pid = (u16::from(data[at + 1] & 0x1F) << 8) | u16::from(data[at + 2]);
            assert_ne!(pid, 0, "unit {i} spans the PAT packet {p}");
        }
        assert_eq!(unit.send_time, index.send_time(unit.first_packet));
        if let Some(t) = last_time {
            assert!(unit.send_time >= t, "unit {i} goes back in time");
        }
        last_time = Some(unit.send_time);
        next_packet += u64::from(unit.ts_packets);
        units += 1;
    }
    assert_eq!(next_packet, index.packet_count(), "units do not cover the file");
    assert_eq!(units, index.unit_count());
    assert_eq!(index.duration(), index.send_time(index.packet_count() - 1));

    // Random access and seeking agree with the unit list.
    for (gsn, unit) in index.random_access_units() {
        assert!(unit.random_access);
        assert_eq!(index.unit(gsn), Some(unit));
    }
    let (gsn, unit) = index.seek(index.duration());
    assert!(unit.random_access && unit.send_time <= index.duration());
    assert_eq!(index.unit(gsn), Some(unit));
});
