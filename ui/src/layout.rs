//! The page shell: head, skip link, header with the project's sections, and the sign-out form.

use heddle_proto::ProjectId;
use maud::{DOCTYPE, Markup, html};

use crate::assets;
use crate::fmt::enc;

/// The sections of a project, in the order of its navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Calls,
    Ops,
    Objects,
    Evaluations,
    Threads,
}

const TABS: [(Tab, &str, &str); 6] = [
    (Tab::Overview, "Overview", ""),
    (Tab::Calls, "Calls", "/calls"),
    (Tab::Evaluations, "Evaluations", "/evaluations"),
    (Tab::Threads, "Threads", "/threads"),
    (Tab::Ops, "Ops", "/ops"),
    (Tab::Objects, "Objects", "/objects"),
];

/// `/{entity}/{project}/weave`, with both parts percent-encoded.
pub fn project_base(p: &ProjectId) -> String {
    format!("/{}/{}/weave", enc(p.entity()), enc(p.project()))
}

/// `/{entity}/{project}/r/call/{id}`: the SDK's link to a call.
pub fn call_url(p: &ProjectId, id: &str) -> String {
    format!("/{}/{}/r/call/{}", enc(p.entity()), enc(p.project()), enc(id))
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="same-origin";
            title { (title) " · heddle" }
            link rel="stylesheet" href=(assets::url("heddle.css"));
            script src=(assets::url("heddle.js")) defer {}
        }
    }
}

/// A page without a project: sign-in, errors.
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.top { a.brand href="/" { "heddle" } }
                (body)
            }
        }
    }
}

/// Who is looking, for the header: the sign-out form needs the session's CSRF token.
pub struct Chrome<'a> {
    pub csrf: &'a str,
    pub who: &'a str,
}

/// A page of a project, with its navigation.
pub fn project_page(
    chrome: &Chrome,
    project: &ProjectId,
    tab: Tab,
    title: &str,
    body: Markup,
) -> Markup {
    let base = project_base(project);
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "heddle" }
                    nav aria-label="Project" {
                        span.crumb {
                            a href="/" { "Projects" } " / "
                            a href=(base) { (project.entity()) "/" (project.project()) }
                        }
                        ul.tabs {
                            @for (t, label, suffix) in TABS {
                                li {
                                    @if t == tab {
                                        a href={(base) (suffix)} aria-current="page" { (label) }
                                    } @else {
                                        a href={(base) (suffix)} { (label) }
                                    }
                                }
                            }
                        }
                    }
                    (signout(chrome))
                }
                main #main { (body) }
            }
        }
    }
}

/// A signed-in page outside any project (the projects list).
pub fn plain_page(chrome: &Chrome, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "heddle" }
                    (signout(chrome))
                }
                main #main { (body) }
            }
        }
    }
}

fn signout(chrome: &Chrome) -> Markup {
    html! {
        form.signout method="post" action="/signout" {
            span.who { (chrome.who) }
            input type="hidden" name="csrf" value=(chrome.csrf);
            button type="submit" { "Sign out" }
        }
    }
}
