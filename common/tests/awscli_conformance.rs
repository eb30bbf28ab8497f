//! allot's reading of `aws sagemaker` structure arguments against the AWS CLI's own: the same
//! strings through awscli's shorthand parser (`awscli.shorthand.ShorthandParser`), and the
//! same number texts through Python's `int()` and `float()` (how the AWS CLI converts a
//! shorthand scalar for an integer or float member). Nothing is sent anywhere.
//!
//! The AWS CLI comes from the Python registry: `ALLOT_AWSCLI_PYTHON` names a Python that can
//! import awscli (`.ci/run` makes one). Without it the test says so and checks nothing, unless
//! `ALLOT_REQUIRE_AWSCLI=1`, when that is a failure.

use std::process::Command;

use allot_common::hyperpod::{
    parse_shorthand_tree, python_float, python_int, JsonScalar, ShorthandNode, ShorthandValue,
};
use serde_json::{json, Value};

fn python() -> Option<String> {
    let py = std::env::var("ALLOT_AWSCLI_PYTHON").ok()?;
    let ok = Command::new(&py)
        .args(["-c", "import awscli.shorthand"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

fn skip_or_fail(what: &str) {
    if std::env::var("ALLOT_REQUIRE_AWSCLI").as_deref() == Ok("1") {
        panic!("ALLOT_REQUIRE_AWSCLI=1 but {what}");
    }
    eprintln!("skipped: {what} (set ALLOT_AWSCLI_PYTHON to a Python with awscli installed)");
}

/// Runs `script` with the inputs as a JSON list on standard input; it prints a JSON list.
fn run_python(py: &str, script: &str, inputs: &[&str]) -> Vec<Value> {
    use std::io::Write;
    let mut child = Command::new(py)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(inputs).expect("json").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python ends");
    assert!(out.status.success(), "python failed");
    serde_json::from_slice(&out.stdout).expect("python prints JSON")
}

fn to_json(n: &ShorthandNode) -> Value {
    match &n.value {
        ShorthandValue::Scalar(s) | ShorthandValue::Json(JsonScalar::Str(s)) => json!(s),
        ShorthandValue::Json(other) => json!(format!("{other:?}")),
        ShorthandValue::List(items) => Value::Array(items.iter().map(to_json).collect()),
        ShorthandValue::Struct(fields) => Value::Object(
            fields
                .iter()
                .map(|f| (f.key.clone(), to_json(&f.value)))
                .collect(),
        ),
    }
}

/// The strings compared: the issue's table, the AWS walkthrough's arguments, and the corners
/// of the grammar (quotes, escapes, blanks, empty values, csv lists, trailing commas,
/// duplicate keys, nesting, non-ASCII).
const SHORTHAND: &[&str] = &[
    "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=2}],ResourceSharingConfig={Strategy=LendAndBorrow,BorrowLimit=50},PreemptTeamTasks=LowerPriority",
    "PriorityClasses=[{Name=inference,Weight=90},{Name=experimentation,Weight=80},{Name=fine-tuning,Weight=50},{Name=training,Weight=70}],FairShare=Enabled",
    "TeamName=team-a,FairShareWeight=0",
    "TeamName=\"tquo\",FairShareWeight=1",
    "TeamName='tquo',FairShareWeight=+1",
    "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=+2}]",
    "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,VCpu=1e1,MemoryInGiB=.5}]",
    "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge,Count=1}],ResourceSharingConfig={BorrowLimit=50}",
    "PreemptTeamTasks=Never",
    "ComputeQuotaResources=[{InstanceType=ml.g5.8xlarge}]",
    "ComputeQuotaResources = [ { InstanceType = \"ml.g5.8xlarge\" , Count = 2 } ] ,\n ResourceSharingConfig = { Strategy = 'LendAndBorrow', BorrowLimit = 50 }",
    " ComputeQuotaResources=[]",
    "",
    "A=",
    "A=,B=1",
    "A=a,b",
    "A=a,b,c=d,e",
    "A=a b,c",
    "A=x=y",
    "A=\\,x,B=y\\,z",
    "A=\"a\\\"b\",B='c\\'d',C=\"e\\\\f\",D=\"g\\h\"",
    "A=[1,]",
    "A=[,a]",
    "A=[{B=1,}]",
    "A={B=1,B=2}",
    "A=1,A=2",
    "A=1,",
    "A=[{B=x,C=}]",
    "A={B=[1,2],C={D=}}",
    "A=[[1,[2]],{B={C=[]}}]",
    "A={}",
    "A=[]",
    "A=é,B=€",
    "A=\"unclosed",
    "A=[1,2",
    "A={B=1",
    "A.b-c/d:e#f=1",
    "A=x]",
    "A=a[1]",
    "A='x' ,B=\"y\" ",
    "A=x ,B=y",
];

/// Where allot reads on purpose what the AWS CLI refuses: blanks at the very end after a list
/// or structure (a file's last newline).
const LENIENT: &[&str] = &["A=[1] ", "A={B=1}\n", "A=1,B=[{C=2}]\r\n"];

#[test]
fn shorthand_reads_as_the_aws_cli_reads_it() {
    let Some(py) = python() else {
        return skip_or_fail("no Python with awscli");
    };
    let script = r#"
import json, sys
from awscli.shorthand import ShorthandParser
out = []
for s in json.load(sys.stdin):
    try:
        out.append({"ok": ShorthandParser().parse(s)})
    except Exception as e:
        out.append({"error": type(e).__name__})
print(json.dumps(out))
"#;
    let all: Vec<&str> = SHORTHAND.iter().chain(LENIENT).copied().collect();
    let theirs = run_python(&py, script, &all);
    let mut differ = Vec::new();
    for (s, t) in all.iter().zip(&theirs) {
        let ours = parse_shorthand_tree(s);
        if LENIENT.contains(s) {
            let trimmed = parse_shorthand_tree(s.trim_end()).map_err(|e| e.to_string());
            assert!(t.get("error").is_some(), "{s:?}: the AWS CLI now reads it");
            assert_eq!(ours.map_err(|e| e.to_string()), trimmed, "{s:?}");
            continue;
        }
        match (t.get("ok"), ours) {
            (Some(v), Ok(fields)) => {
                let mine = Value::Object(
                    fields
                        .iter()
                        .map(|f| (f.key.clone(), to_json(&f.value)))
                        .collect(),
                );
                if &mine != v {
                    differ.push(format!("{s:?}: awscli {v}, allot {mine}"));
                }
            }
            (None, Err(_)) => {}
            (Some(v), Err(e)) => differ.push(format!("{s:?}: awscli {v}, allot refuses: {e}")),
            (None, Ok(f)) => differ.push(format!("{s:?}: awscli refuses, allot reads {f:?}")),
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

const NUMBERS: &[&str] = &[
    "2",
    "+2",
    "-2",
    " 2 ",
    "007",
    "1_000",
    "1__0",
    "_1",
    "1_",
    "2.0",
    "1e1",
    "1E1",
    ".5",
    "5.",
    "+.5e-1",
    "1_0.2_5",
    "inf",
    "-Infinity",
    "nan",
    "NaN",
    "infinity",
    "",
    " ",
    "0x10",
    "1e",
    "e1",
    "1.2.3",
    "99999999999999999999",
    // Digits of other scripts, and Python's other blanks.
    "٣",
    "１_０",
    "१.५",
    "-۱e۲",
    "\u{2003}٣\u{3000}",
    "\u{1c}7\u{1f}",
    "\u{85}8",
    "𝟗𝟘",
    "٣a",
    "Ⅻ",
    "²",
    "٣_",
];

#[test]
fn numbers_convert_as_python_converts_them() {
    let Some(py) = python() else {
        return skip_or_fail("no Python with awscli");
    };
    let script = r#"
import json, sys
def conv(f, s):
    try:
        v = f(s)
        return repr(v) if f is float else str(v)
    except Exception:
        return None
print(json.dumps([[conv(int, s), conv(float, s)] for s in json.load(sys.stdin)]))
"#;
    let theirs = run_python(&py, script, NUMBERS);
    let mut differ = Vec::new();
    for (s, t) in NUMBERS.iter().zip(&theirs) {
        let int = python_int(s).map(|v| v.to_string());
        let float = python_float(s).map(|v| {
            if v.is_nan() {
                "nan".to_string()
            } else if v.is_infinite() {
                if v > 0.0 { "inf" } else { "-inf" }.to_string()
            } else {
                format!("{v:?}")
            }
        });
        let (ti, tf) = (t[0].as_str(), t[1].as_str());
        // Python prints 1e+20 where Rust prints 1e20: compare the values.
        let same_float = match (&float, tf) {
            (Some(a), Some(b)) => {
                a == b || a.parse::<f64>().ok() == b.parse::<f64>().ok() && a != "nan"
            }
            (None, None) => true,
            _ => false,
        };
        if int.as_deref() != ti || !same_float {
            differ.push(format!(
                "{s:?}: python int {ti:?} float {tf:?}; allot {int:?} {float:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
