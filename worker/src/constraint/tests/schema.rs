//! A JSON-schema check for the keywords the test schemas use (`type`, `enum`, `properties`,
//! `required`, `additionalProperties`, `items`, `minItems`, `maxItems`, `minLength`,
//! `maxLength`, `minimum`, `maximum`), hand-written to keep a schema validator and its
//! dependencies out of the build. Any other keyword in a test schema is a test bug.

use serde_json::Value;

const KNOWN: [&str; 14] = [
    "type",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "description",
    "title",
];

/// Panics with the path of the first violation.
pub fn check(value: &Value, schema: &Value) {
    if let Err(error) = violation(value, schema, "$") {
        panic!("{value} does not match {schema}: {error}");
    }
}

fn violation(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let schema = schema.as_object().ok_or("schema is not an object")?;
    for key in schema.keys() {
        assert!(KNOWN.contains(&key.as_str()), "the checker lacks {key}");
    }
    let bound = |key| schema.get(key).and_then(Value::as_u64).map(|n| n as usize);
    let fail = |what: &str| Err(format!("{path}: {what}"));
    if let Some(kind) = schema.get("type").and_then(Value::as_str)
        && !has_type(value, kind)
    {
        return fail(&format!("not of type {kind}"));
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        return fail("not in the enum");
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count();
        if bound("minLength").is_some_and(|min| chars < min)
            || bound("maxLength").is_some_and(|max| chars > max)
        {
            return fail(&format!("length {chars} out of bounds"));
        }
    }
    if let Some(number) = value.as_f64() {
        let limit = |key| schema.get(key).and_then(Value::as_f64);
        if limit("minimum").is_some_and(|min| number < min)
            || limit("maximum").is_some_and(|max| number > max)
        {
            return fail(&format!("{number} out of bounds"));
        }
    }
    if let Some(items) = value.as_array() {
        if bound("minItems").is_some_and(|min| items.len() < min)
            || bound("maxItems").is_some_and(|max| items.len() > max)
        {
            return fail(&format!("{} items out of bounds", items.len()));
        }
        if let Some(item) = schema.get("items") {
            for (index, element) in items.iter().enumerate() {
                violation(element, item, &format!("{path}[{index}]"))?;
            }
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !object.contains_key(name.as_str().unwrap_or_default()) {
                return fail(&format!("{name} missing"));
            }
        }
        for (key, element) in object {
            let path = format!("{path}.{key}");
            match (
                properties.and_then(|p| p.get(key)),
                schema.get("additionalProperties"),
            ) {
                (Some(property), _) => violation(element, property, &path)?,
                (None, Some(Value::Bool(false))) => return Err(format!("{path}: not allowed")),
                (None, Some(additional @ Value::Object(_))) => {
                    violation(element, additional, &path)?
                }
                (None, _) => {}
            }
        }
    }
    Ok(())
}

fn has_type(value: &Value, kind: &str) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => panic!("the checker lacks type {kind}"),
    }
}

/// The text has no whitespace outside strings but the one space after each `,` and `:`, which
/// is how llguidance writes JSON under corral's options.
pub fn check_compact(text: &str) {
    let mut in_string = false;
    let mut escaped = false;
    let mut previous = ' ';
    let chars: Vec<char> = text.chars().collect();
    for (index, &c) in chars.iter().enumerate() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else {
            match c {
                '"' => in_string = true,
                ' ' => assert!(
                    matches!(previous, ',' | ':'),
                    "free space at {index} in {text}"
                ),
                ',' | ':' => assert_eq!(chars.get(index + 1), Some(&' '), "in {text}"),
                c => assert!(!c.is_whitespace(), "free whitespace at {index} in {text}"),
            }
        }
        previous = c;
    }
}
