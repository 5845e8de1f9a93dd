//! Object-name globs for `[[auth.users]] objects`: `*` any run of characters, `?` one.

/// A checked glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob(Vec<char>);

impl Glob {
    /// A glob; `Err` (in words) for an empty one.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("an empty glob matches nothing (\"*\" is every object)".into());
        }
        Ok(Self(pattern.chars().collect()))
    }

    /// Whether `name` matches: greedy with backtracking to the last `*`, linear in practice.
    #[must_use]
    pub fn matches(&self, name: &str) -> bool {
        let p = &self.0;
        let s: Vec<char> = name.chars().collect();
        let (mut i, mut j) = (0, 0);
        // The last star seen in the pattern and where in the name it started matching.
        let mut star: Option<(usize, usize)> = None;
        while j < s.len() {
            match p.get(i) {
                Some('*') => {
                    star = Some((i, j));
                    i += 1;
                }
                Some(&c) if c == '?' || c == s[j] => {
                    i += 1;
                    j += 1;
                }
                _ => match star {
                    Some((si, sj)) => {
                        i = si + 1;
                        j = sj + 1;
                        star = Some((si, sj + 1));
                    }
                    None => return false,
                },
            }
        }
        p[i..].iter().all(|c| *c == '*')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_a_shell_would() {
        let m = |p: &str, s: &str| Glob::new(p).unwrap().matches(s);
        assert!(m("*", ""));
        assert!(m("*", "anything/at all"));
        assert!(m("cam-*", "cam-1"));
        assert!(!m("cam-*", "xcam-1"));
        assert!(m("*-hd", "movie-hd"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("clip?", "clip7"));
        assert!(!m("clip?", "clip"));
        assert!(m("é*", "été"));
        assert!(Glob::new("").is_err());
    }

    proptest::proptest! {
        #[test]
        fn a_literal_matches_only_itself(a in "[a-z?]{0,8}", b in "[a-z]{0,8}") {
            let lit = a.replace('?', "x");
            let g = Glob::new(&format!("{lit}*")).unwrap();
            proptest::prop_assert_eq!(g.matches(&b), b.starts_with(&lit));
        }
    }
}
