//! Names and free text that enter through the API, checked against the AWS API model's
//! patterns (`shared/spec/hyperpod-api-model.md`), and how a bad value is shown in an error.

/// Longest part of a bad value an error repeats.
const SHOWN: usize = 64;

/// `value` as an error shows it: quoted, with escapes, cut after 64 characters with its
/// length, so a 100,000-character name makes a short error.
pub fn shown(value: &str) -> String {
    let n = value.chars().count();
    if n <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}... ({n} characters)")
    }
}

/// The AWS API's `EntityName` (compute quota and scheduler config names): 1 to 63 ASCII
/// letters, digits and hyphens, starting and ending with a letter or digit
/// (`[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`).
pub fn check_entity_name(what: &str, name: &str) -> Result<(), String> {
    let ok = (1..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} name {}: use 1 to 63 letters, digits and hyphens, starting and ending with a \
             letter or digit (the AWS API's EntityName)",
            shown(name)
        ))
    }
}

/// The AWS API's `EntityDescription`: at most 1,024 characters of letters, marks, spaces,
/// symbols, numbers and punctuation, so no control characters.
pub fn check_description(what: &str, text: &str) -> Result<(), String> {
    let n = text.chars().count();
    if n > 1024 {
        return Err(format!(
            "{what} description of {n} characters: at most 1024 (the AWS API's EntityDescription)"
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{what} description {} holds the control character {c:?}: use letters, marks, \
             spaces, symbols, numbers and punctuation (the AWS API's EntityDescription)",
            shown(text)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_names_follow_the_aws_pattern() {
        for ok in ["a", "Team-A-quota", "q1", "a--b", &"x".repeat(63)] {
            check_entity_name("compute quota", ok).unwrap();
        }
        for bad in [
            "",
            "-quota",
            "quota-",
            "team_a!",
            "a b",
            "../../etc/passwd",
            "new\nline",
            &"x".repeat(64),
            "é",
        ] {
            let e = check_entity_name("compute quota", bad).unwrap_err();
            assert!(e.starts_with("compute quota name "), "{e}");
            assert!(e.contains("1 to 63 letters, digits and hyphens"), "{e}");
        }
    }

    #[test]
    fn long_values_are_cut_in_errors() {
        let e = check_entity_name("compute quota", &"q".repeat(100_000)).unwrap_err();
        assert!(e.len() < 300, "{e}");
        assert!(e.contains("(100000 characters)"), "{e}");
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
    }

    #[test]
    fn descriptions_are_text_of_at_most_1024_characters() {
        check_description(
            "compute quota",
            "GPU quota for the NLP team (p5, 2 nodes): 50% borrow",
        )
        .unwrap();
        check_description("compute quota", &"é".repeat(1024)).unwrap();
        let e = check_description("compute quota", &"d".repeat(1025)).unwrap_err();
        assert!(e.contains("1025 characters: at most 1024"), "{e}");
        let e = check_description("compute quota", "two\nlines").unwrap_err();
        assert!(e.contains("control character '\\n'"), "{e}");
    }
}
