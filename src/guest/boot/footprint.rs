//! warden's resident memory once booted. Most of what a machine's warden
//! holds resident at idle is its own binary's code, mapped from the page
//! cache: the boot's code (users, layout, firewall, probes) is touched
//! once and then stays mapped for the machine's life. At the end of boot
//! warden unmaps the pages of its read-only segments (code and constants):
//! what it serves with maps back in on first use, from the page cache, and
//! the rest becomes page cache the kernel may reclaim for the agent. It
//! does so again once the machine, used, goes idle: each fault maps back
//! its neighbours too (the kernel's fault-around, 64 KiB), so a few
//! requests bring back megabytes that an idle warden does not run.
//!
//! Only segments the binary never writes are unmapped: no relocation
//! touches them (those go to the RELRO and data segments, whose pages are
//! the process's own copies and would be lost), and exec denies writes to
//! the running binary's file, so what maps back in is what was there.

/// One loadable segment of the running binary, as its program header has
/// it: its address in memory (load bias added), size, and whether it is
/// writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: usize,
    pub size: usize,
    pub writable: bool,
}

const PAGE: usize = 4096;

/// Pure: the page ranges that hold read-only segments only (a page shared
/// with a writable segment is kept), merged where they touch.
pub fn read_only_pages(segments: &[Segment]) -> Vec<(usize, usize)> {
    let pages = |s: &Segment| {
        let start = s.start & !(PAGE - 1);
        let end = (s.start + s.size + PAGE - 1) & !(PAGE - 1);
        (start, end)
    };
    let writable: Vec<(usize, usize)> = segments.iter().filter(|s| s.writable).map(pages).collect();
    let mut ranges: Vec<(usize, usize)> = segments
        .iter()
        .filter(|s| !s.writable && s.size > 0)
        .map(pages)
        .filter_map(|(mut start, mut end)| {
            for &(w_start, w_end) in &writable {
                if w_start < end && w_end > start {
                    // Keep every page a writable segment shares: cut this
                    // range where that one starts (or, when it starts
                    // first, where it ends); whatever lies beyond a
                    // writable segment in the middle is kept too.
                    match w_start > start {
                        true => end = w_start,
                        false => start = w_end,
                    }
                }
            }
            (start < end).then_some((start, end))
        })
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if last.1 >= start => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The running binary's loadable segments, from the program headers the
/// kernel mapped for it (AT_PHDR); None where it has no PT_PHDR to find
/// its load address by.
fn own_segments() -> Option<Vec<Segment>> {
    // SAFETY: getauxval reads the auxiliary vector; it has no
    // preconditions.
    let (at_phdr, count) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR) as usize,
            libc::getauxval(libc::AT_PHNUM) as usize,
        )
    };
    if at_phdr == 0 || count == 0 {
        return None;
    }
    // SAFETY: the kernel maps the program's headers at AT_PHDR, AT_PHNUM
    // of them, for the life of the process (the first read-only segment
    // holds them); they are only read here.
    let headers = unsafe { std::slice::from_raw_parts(at_phdr as *const libc::Elf64_Phdr, count) };
    let own = headers.iter().find(|h| h.p_type == libc::PT_PHDR)?;
    let bias = at_phdr.wrapping_sub(own.p_vaddr as usize);
    if has_text_relocations(headers, bias) {
        return None;
    }
    Some(
        headers
            .iter()
            .filter(|h| h.p_type == libc::PT_LOAD)
            .map(|h| Segment {
                start: bias.wrapping_add(h.p_vaddr as usize),
                size: h.p_memsz as usize,
                writable: h.p_flags & libc::PF_W != 0,
            })
            .collect(),
    )
}

/// Whether the binary was linked with text relocations: then its start
/// wrote into read-only segments, and those pages are its own copies.
fn has_text_relocations(headers: &[libc::Elf64_Phdr], bias: usize) -> bool {
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 0x4;
    /// Elf64_Dyn.
    #[repr(C)]
    struct Dyn {
        tag: i64,
        value: u64,
    }
    let Some(dynamic) = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) else {
        return false;
    };
    let count = dynamic.p_memsz as usize / std::mem::size_of::<Dyn>();
    // SAFETY: PT_DYNAMIC's entries are mapped at its address (bias added)
    // for the life of the process; they are only read.
    let entries = unsafe {
        std::slice::from_raw_parts(
            bias.wrapping_add(dynamic.p_vaddr as usize) as *const Dyn,
            count,
        )
    };
    entries
        .iter()
        .take_while(|e| e.tag != 0)
        .any(|e| e.tag == DT_TEXTREL || (e.tag == DT_FLAGS && e.value & DF_TEXTREL != 0))
}

/// Unmaps the binary's read-only pages (see the module's comment).
/// Returns how many bytes were unmapped, or why none were.
pub fn unmap_code() -> Result<usize, String> {
    let segments = own_segments()
        .ok_or("no program header table to find the segments by, or text relocations")?;
    let mut unmapped = 0;
    for (start, end) in read_only_pages(&segments) {
        // SAFETY: the range covers whole pages of the running binary's
        // read-only segments alone (read_only_pages keeps any page a
        // writable segment shares); nothing ever writes them, so dropping
        // them loses nothing: the next access maps the same bytes again
        // from the file, which exec keeps from being written.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc < 0 {
            return Err(format!(
                "madvise({start:#x}, {}): {}",
                end - start,
                std::io::Error::last_os_error()
            ));
        }
        unmapped += end - start;
    }
    Ok(unmapped)
}

/// One malloc arena for the whole process. glibc gives each thread that
/// allocates while another holds the main arena an arena of its own
/// (64 MiB reserved, a few pages to tens of KiB resident each, kept for
/// the process's life); warden's few threads allocate little, and at
/// idle those arenas were about a fifth of its own memory. Set before
/// any other thread is started.
pub fn one_malloc_arena() {
    // SAFETY: mallopt only sets an allocator parameter, under malloc's own
    // lock; it touches no memory of the caller's.
    let set = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    if set != 1 {
        crate::say!("malloc keeps an arena per thread: M_ARENA_MAX was refused");
    }
}

/// How far below where this function runs the main thread's stack is
/// kept: room for its own calls (the maps read, madvise) and more.
const STACK_KEPT_BELOW: usize = 32 * 1024;

/// Gives back the main thread's stack pages below where the boot's end
/// runs: the boot went deeper (the runtime's building, the firewall, the
/// probes) than supervising ever does, and those pages stayed resident
/// for the machine's life. Dead memory below the stack pointer may be
/// dropped: the kernel gives zeroed pages again where the stack grows
/// back. Must be called on the main thread; returns the bytes given back.
#[inline(never)]
pub fn give_back_boot_stack() -> std::io::Result<usize> {
    let here = 0u8;
    let sp = std::hint::black_box(std::ptr::addr_of!(here)) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let (start, _) = stack_of(&maps)
        .filter(|&(start, end)| (start..end).contains(&sp))
        .ok_or_else(|| {
            std::io::Error::other("this thread's stack is not [stack] in /proc/self/maps")
        })?;
    let Some(top) = (sp & !(PAGE - 1))
        .checked_sub(STACK_KEPT_BELOW)
        .filter(|&t| t > start)
    else {
        return Ok(0);
    };
    // SAFETY: [start, top) lies in this thread's own stack mapping, at
    // least STACK_KEPT_BELOW below this function's frame: no frame lives
    // there now (the stack grows down, and only this thread uses it), and
    // dropping the pages of a private anonymous mapping only makes the
    // next touch find them zeroed.
    let done =
        unsafe { libc::madvise(start as *mut libc::c_void, top - start, libc::MADV_DONTNEED) };
    match done {
        0 => Ok(top - start),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Pure: the main thread's stack mapping in a `/proc/self/maps` text.
pub fn stack_of(maps: &str) -> Option<(usize, usize)> {
    let line = maps
        .lines()
        .find(|l| l.split_whitespace().nth(5) == Some("[stack]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    );
    (start < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_in_maps() {
        let cases: &[(&str, Option<(usize, usize)>)] = &[
            (
                "555559662000-5555596b2000 rw-p 00000000 00:00 0                          [heap]\n\
                 7fff33780000-7fff337a1000 rw-p 00000000 00:00 0                          [stack]\n",
                Some((0x7fff33780000, 0x7fff337a1000)),
            ),
            ("7fff33780000-7fff337a1000 rw-p 00000000 00:00 0 [stack]", Some((0x7fff33780000, 0x7fff337a1000))),
            // A thread's stack is anonymous, unnamed: not this one.
            ("7fc22a89a000-7fc22aa9a000 rw-p 00000000 00:00 0 \n", None),
            // A file whose name ends so is not the stack.
            ("7f0000000000-7f0000001000 r--p 00000000 08:01 12 /tmp/[stack]x", None),
            ("zz-7fff337a1000 rw-p 00000000 00:00 0 [stack]", None),
            ("7fff337a1000-7fff33780000 rw-p 00000000 00:00 0 [stack]", None),
            ("", None),
        ];
        for (maps, want) in cases {
            assert_eq!(stack_of(maps), *want, "{maps}");
        }
    }

    #[test]
    fn only_the_main_threads_stack_is_given_back() {
        // Tests run on threads of the harness's: their stacks are not
        // [stack], and nothing is dropped (the main thread's case runs at
        // every boot, and every machine test boots).
        let given = give_back_boot_stack();
        assert!(
            given.is_err(),
            "a thread's own stack is not [stack]: {given:?}"
        );
    }

    fn ro(start: usize, size: usize) -> Segment {
        Segment {
            start,
            size,
            writable: false,
        }
    }

    fn rw(start: usize, size: usize) -> Segment {
        Segment {
            start,
            size,
            writable: true,
        }
    }

    /// This process's file-backed resident memory.
    fn rss_file_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn read_only_pages_table() {
        type Pages = Vec<(usize, usize)>;
        let cases: Vec<(&str, Vec<Segment>, Pages)> = vec![
            (
                // As warden's static PIE is laid out: R, RX (not page
                // aligned, sharing a page with R), RELRO+RW, RW.
                "static pie",
                vec![
                    ro(0x1000_0000, 0x16edfc),
                    ro(0x1016_fe00, 0x5ab060),
                    rw(0x1071_be60, 0x221a0),
                    rw(0x1073_e7f0, 0xc6d8),
                ],
                vec![(0x1000_0000, 0x1071_b000)],
            ),
            (
                "a writable segment sharing the last read-only page keeps it",
                vec![ro(0x1000, 0x1800), rw(0x2900, 0x100)],
                vec![(0x1000, 0x2000)],
            ),
            (
                "a writable segment before, sharing the first page",
                vec![rw(0x1000, 0x1100), ro(0x2100, 0x2000)],
                vec![(0x3000, 0x5000)],
            ),
            (
                "a read-only segment inside one writable page is kept whole",
                vec![rw(0x1000, 0x800), ro(0x1800, 0x100)],
                vec![],
            ),
            ("nothing read-only", vec![rw(0x1000, 0x1000)], vec![]),
            ("an empty segment", vec![ro(0x1000, 0)], vec![]),
            (
                "apart, not merged",
                vec![ro(0x1000, 0x1000), rw(0x2000, 0x1000), ro(0x3000, 0x1000)],
                vec![(0x1000, 0x2000), (0x3000, 0x4000)],
            ),
        ];
        for (name, segments, want) in cases {
            assert_eq!(read_only_pages(&segments), want, "{name}");
        }
    }

    #[test]
    fn this_process_finds_its_segments_and_keeps_running_after_unmapping() {
        let segments = own_segments().expect("the test binary's program headers");
        assert!(segments.iter().any(|s| !s.writable), "{segments:?}");
        assert!(segments.iter().any(|s| s.writable), "{segments:?}");
        // The code this test runs is among what is unmapped: it maps back
        // in, and a constant read after it is still itself.
        let before = rss_file_kb();
        let unmapped = unmap_code().unwrap();
        let after = rss_file_kb();
        assert!(unmapped > 0);
        assert!(
            after < before,
            "file-backed resident {before} kB, then {after} kB"
        );
        let table: &[&str] = &["still", "here"];
        assert_eq!(table.join(" "), "still here");
    }
}
