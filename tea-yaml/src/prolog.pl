% tea's Prolog support, consulted into every Scryer Prolog machine that runs `language: prolog`
% blocks (tea-yaml/src/prolog.rs). The Edge Agent's contract: `state/2` facts in, `return/2`
% out; a block's clauses are read by Prolog's own reader, facts and rules asserted for the
% block's run, directives and queries called, each under an inference limit.

:- use_module(library(lists)).
:- use_module(library(between)).
:- use_module(library(iso_ext)).
:- use_module(library(charsio)).
:- use_module(library(format)).
:- use_module(library(dcgs)).
:- use_module(library(dif)).
:- use_module(library(pairs)).
:- use_module(library(ordsets)).
:- use_module(library(assoc)).
:- dynamic('$tea_global'/2).

% SWI-Prolog's prefix operators for declarations (`:- dynamic foo/1.`).
:- op(1150, fx, dynamic).
:- op(1150, fx, discontiguous).
:- op(1150, fx, table).

:- dynamic(state/2).
:- dynamic('$tea_return'/2).
:- dynamic('$tea_bindings'/1).

return(Key, Value) :- assertz('$tea_return'(Key, Value)).

% --- Reading, checking and classifying a block -------------------------------------------------

% '$tea_check'(+Clauses, -Result): Clauses is a list of c(Line, Codes), each one clause's text.
% Result is ok, or error(Line, Message) for the first clause that does not read or that calls
% what the sandbox refuses.
'$tea_check'([], ok).
'$tea_check'([c(Line, Codes)|Cs], Result) :-
    (   '$tea_read'(Codes, Term, Error)
    ->  (   Error == none
        ->  (   '$tea_unsafe_clause'(Term, Why)
            ->  Result = error(Line, Why)
            ;   '$tea_check'(Cs, Result)
            )
        ;   '$tea_describe'(Error, Message),
            Result = error(Line, Message)
        )
    ;   Result = error(Line, 'the clause does not read as Prolog')
    ).

'$tea_read'(Codes, Term, Error) :- '$tea_read'(Codes, Term, _, Error).
'$tea_read'(Codes, Term, Vs, Error) :-
    atom_codes(Atom, Codes),
    atom_chars(Atom, Chars),
    catch(( read_term_from_chars(Chars, Term, [variable_names(Vs)]), Error = none ),
          error(syntax_error(What), _),
          Error = syntax(What)).

'$tea_describe'(syntax(What), Message) :- !,
    '$tea_text'(What, W),
    '$tea_concat'('syntax error: ', W, Message).

'$tea_describe'(error(permission_error(_, _, _), Why), Why) :- atom(Why), !.
'$tea_describe'(error(syntax_error(What), _), Message) :- !,
    '$tea_text'(What, W),
    '$tea_concat'('syntax error: ', W, Message).
'$tea_describe'(error(E, _), Message) :- !, '$tea_text'(E, Message).
'$tea_describe'(E, Message) :- '$tea_text'(E, Message).

% atom_concat/3 of Scryer 0.10 fails on some atoms (those of its own errors): this does not.
'$tea_concat'(A, B, C) :-
    write_term_to_chars(A, [], As), write_term_to_chars(B, [], Bs), append(As, Bs, Cs), atom_chars(C, Cs).

'$tea_text'(T, A) :-
    (   atom(T) -> A = T
    ;   write_term_to_chars(T, [quoted(true)], Cs), atom_chars(A, Cs)
    ).

% The kinds of a block's clauses, as The Edge Agent tells them apart.
'$tea_kind'((:- Body), directive(Body)) :- !.
'$tea_kind'((?- Body), query(Body)) :- !.
'$tea_kind'((Head :- Body), rule(Head, Body)) :- !.
'$tea_kind'(Term, fact(Term)) :-
    callable(Term), \+ atom(Term),
    functor(Term, F, N),
    \+ '$tea_action'(F), \+ '$tea_denied'(F, N), \+ '$tea_defined_goal'(Term), !.
'$tea_kind'(Term, query(Term)).

% A term whose predicate exists already (a built-in or a library's, not a fact a block asserted)
% is called, not asserted.
'$tea_defined_goal'(Term) :-
    catch(predicate_property(Term, _), _, fail),
    \+ catch(predicate_property(Term, dynamic), _, fail).

'$tea_action'(F) :- member(F, [return, state, ':', ',', ';', '->', '*->', '>', '<', '>=', '=<',
    '=:=', '=\\=', '=', '\\=', '==', '\\==', '@<', '@>', '@=<', '@>=', '\\+', is, findall,
    bagof, setof, member, memberchk, append, length, nth0, nth1, msort, sort, reverse, last,
    sumlist, sum_list, max_list, min_list, forall, aggregate_all, aggregate, call, once, succ,
    plus, abs, sign, max, min, write, writeln, print, format, atom, number, integer, float,
    compound, is_list, ground, atom_string, atom_codes, atom_chars, '#=', '#\\=', '#<', '#>',
    '#=<', '#>=', in, ins, label, labeling, all_different, all_distinct, sum, tuples_in]).

% --- The sandbox --------------------------------------------------------------------------------
% A block may compute, but not reach outside the machine: no files, streams, flags, operators,
% module loading or halting, and no calls of the machine's internals ('$…' predicates) or of
% another module's (M:G). Goals known only when the block runs (call(G) with G unbound) are
% checked when called.

'$tea_unsafe_clause'(Term, Why) :-
    '$tea_kind'(Term, Kind),
    (   Kind = directive(Body) -> '$tea_unsafe_directive'(Body, Why)
    ;   Kind = query(Body) -> '$tea_unsafe_goal'(Body, Why)
    ;   Kind = rule(Head, Body) -> ( '$tea_unsafe_head'(Head, Why) -> true ; '$tea_unsafe_goal'(Body, Why) )
    ;   Kind = fact(Head) -> '$tea_unsafe_head'(Head, Why)
    ).

'$tea_unsafe_head'(M:H, Why) :- !,
    '$tea_text'(M:H, T),
    '$tea_concat'(T, ': a block defines no other module''s predicates (tea''s sandbox)', Why).
'$tea_unsafe_head'(Head, Why) :-
    callable(Head), functor(Head, F, N),
    (   atom_chars(F, ['$'|_]) -> '$tea_refused'(F/N, Why)
    ;   member(F/N, [state/2, return/2]) -> '$tea_refused_define'(F/N, Why)
    ).

'$tea_refused_define'(PI, Why) :-
    '$tea_text'(PI, T),
    '$tea_concat'(T, ' is tea''s (state in, updates out); a block may not define it', Why).

'$tea_unsafe_directive'(use_module(library(L)), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(use_module(library(L), _), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(ensure_loaded(library(L)), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(dynamic(_), _) :- !, fail.
'$tea_unsafe_directive'(discontiguous(_), _) :- !, fail.
'$tea_unsafe_directive'(set_prolog_flag(double_quotes, _), _) :- !, fail.
'$tea_unsafe_directive'(Body, Why) :- '$tea_unsafe_goal'(Body, Why).

% The libraries a block may name (loaded already; SWI-Prolog's names too).
'$tea_library'(L) :- member(L, [lists, clpfd, clpz, apply, aggregate, between, dif, pairs,
    charsio, format, iso_ext, error, strings, apply_macros, solution_sequences]).

'$tea_refused_library'(L, Why) :-
    '$tea_text'(library(L), T),
    '$tea_concat'(T, ' is not among the libraries a tea block may name (lists, clpfd/clpz, apply, aggregate, between, dif, pairs, charsio, format, iso_ext, error; all loaded already)', Why).

'$tea_unsafe_goal'(G, _) :- var(G), !, fail.
'$tea_unsafe_goal'(M:G, Why) :- !,
    '$tea_text'(M:G, T),
    '$tea_concat'(T, ': a block calls no other module''s predicates (tea''s sandbox)', Why).
'$tea_unsafe_goal'((A, B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'((A ; B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'((A -> B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'(\+ A, Why) :- !, '$tea_unsafe_goal'(A, Why).
'$tea_unsafe_goal'(format(S, _, _), Why) :- !,
    (   nonvar(S), '$tea_sink'(S) -> fail ; '$tea_refused'(format/3, Why) ).
'$tea_unsafe_goal'(G, Why) :-
    callable(G), functor(G, F, N),
    (   '$tea_denied'(F, N) -> '$tea_refused'(F/N, Why)
    ;   '$tea_meta_spec'(F, N, Specs), G =.. [_|Args],
        '$tea_nth_goal'(Specs, Args, AG), '$tea_unsafe_goal'(AG, Why)
    ).

% A goal argument of a meta-predicate call, extended by its extra arguments (closures).
'$tea_nth_goal'([S|_], [A|_], AG) :- nonvar(A), '$tea_spec_goal'(S, A, AG).
'$tea_nth_goal'([_|Ss], [_|As], AG) :- '$tea_nth_goal'(Ss, As, AG).
'$tea_spec_goal'(0, A, A).
'$tea_spec_goal'(^, A, G) :- '$tea_strip_carets'(A, G).
'$tea_spec_goal'(c, A, B) :- A = (_ :- B).
'$tea_spec_goal'(N, A, G) :- integer(N), N > 0, '$tea_extend'(A, N, G).
'$tea_strip_carets'(A, G) :- ( nonvar(A), A = _^B -> '$tea_strip_carets'(B, G) ; G = A ).

'$tea_refused'(PI, Why) :-
    '$tea_text'(PI, T),
    '$tea_concat'(T, ' reaches outside the block (files, streams, flags, modules or the process), which tea''s sandbox refuses', Why).

'$tea_denied'(F, _) :-
    atom_chars(F, ['$'|_]),
    \+ member(F, ['$tea_safe_call', '$tea_checked', '$tea_assert', '$tea_format']).
'$tea_denied'(F, N) :- member(F/N, [open/3, open/4, close/1, close/2, see/1, tell/1, append/1,
    consult/1, use_module/1, use_module/2, ensure_loaded/1, load_files/2, halt/0, halt/1,
    set_prolog_flag/2, op/3, set_input/1, set_output/1, set_stream_position/2, shell/1,
    shell/2, getenv/2, setenv/2, unsetenv/1, delete_file/1, rename_file/2, make_directory/1,
    delete_directory/1, working_directory/2, directory_files/2, file_exists/1,
    directory_exists/1, process_create/3, sleep/1, abolish/1, abolish/2, read/1, read/2,
    read_term/2, read_term/3, get_char/1, get_char/2, peek_char/1, get_code/1, put_char/2,
    flush_output/1, nl/1, write/2, writeq/2, print/2, write_term/3, write_canonical/2,
    phrase_from_file/2, phrase_from_file/3, char_conversion/2, current_input/1,
    current_output/1, stream_property/2, at_end_of_stream/1, setup_call_cleanup/3,
    call_cleanup/2, call_with_inference_limit/3, partial_string/3, phrase/2, phrase/3]).

% The arguments of the meta-predicates: - (data), 0 (a goal), N (a closure called with N more
% arguments), ^ (a goal under V^), c (a clause, whose body is a goal).
'$tea_meta_spec'(call, 1, [0]).
'$tea_meta_spec'(call, N, [K|Ds]) :- between(2, 8, N), K is N - 1, length(Ds, K), maplist(=(-), Ds).
'$tea_meta_spec'(once, 1, [0]).
'$tea_meta_spec'(ignore, 1, [0]).
'$tea_meta_spec'(findall, 3, [-, 0, -]).
'$tea_meta_spec'(findall, 4, [-, 0, -, -]).
'$tea_meta_spec'(bagof, 3, [-, ^, -]).
'$tea_meta_spec'(setof, 3, [-, ^, -]).
'$tea_meta_spec'(aggregate_all, 3, [-, 0, -]).
'$tea_meta_spec'(forall, 2, [0, 0]).
'$tea_meta_spec'(catch, 3, [0, -, 0]).
'$tea_meta_spec'(maplist, N, [K|Ds]) :- between(2, 8, N), K is N - 1, length(Ds, K), maplist(=(-), Ds).
'$tea_meta_spec'(foldl, N, [K|Ds]) :- between(4, 7, N), K is N - 1, length(Ds, K), maplist(=(-), Ds).
'$tea_meta_spec'(include, 3, [1, -, -]).
'$tea_meta_spec'(exclude, 3, [1, -, -]).
'$tea_meta_spec'(partition, 4, [1, -, -, -]).
'$tea_meta_spec'(assertz, 1, [c]).
'$tea_meta_spec'(asserta, 1, [c]).
'$tea_meta_spec'(assert, 1, [c]).

'$tea_extend'(G, 0, G) :- !.
'$tea_extend'(G, N, G1) :-
    (   G = _:_ -> G1 = G
    ;   callable(G) -> G =.. L0, length(Xs, N), append(L0, Xs, L1), G1 =.. L1
    ;   G1 = G
    ).

% A goal known only when the block runs: checked, then guarded, then called.
'$tea_safe_call'(G) :-
    (   var(G) -> throw(error(instantiation_error, call/1))
    ;   '$tea_unsafe_goal'(G, Why) -> throw(error(permission_error(call, sandboxed, G), Why))
    ;   '$tea_guard'(G, Guarded), call(Guarded)
    ).

% A closure known only when the block runs, called with its extra arguments.
'$tea_checked'(C, A) :- '$tea_call_closure'(C, [A]).
'$tea_checked'(C, A, B) :- '$tea_call_closure'(C, [A, B]).
'$tea_checked'(C, A, B, D) :- '$tea_call_closure'(C, [A, B, D]).
'$tea_checked'(C, A, B, D, E) :- '$tea_call_closure'(C, [A, B, D, E]).
'$tea_checked'(C, A, B, D, E, F) :- '$tea_call_closure'(C, [A, B, D, E, F]).
'$tea_checked'(C, A, B, D, E, F, G) :- '$tea_call_closure'(C, [A, B, D, E, F, G]).
'$tea_checked'(C, A, B, D, E, F, G, H) :- '$tea_call_closure'(C, [A, B, D, E, F, G, H]).
'$tea_call_closure'(C, Extra) :-
    (   var(C) -> throw(error(instantiation_error, call/2))
    ;   C = _:_ -> '$tea_safe_call'(C)
    ;   callable(C) -> C =.. L0, append(L0, Extra, L1), G =.. L1, '$tea_safe_call'(G)
    ;   throw(error(type_error(callable, C), call/2))
    ).

% assertz/asserta/assert: the clause's body guarded, its head not tea's.
'$tea_assert'(Which, C) :-
    (   nonvar(C), C = (H :- B) -> '$tea_guard'(B, GB), C2 = (H :- GB) ; H = C, C2 = C ),
    (   nonvar(H), '$tea_unsafe_head'(H, Why) -> throw(error(permission_error(modify, static_procedure, H), Why))
    ;   nonvar(C), C = (_ :- B0), '$tea_unsafe_goal'(B0, Why) -> throw(error(permission_error(call, sandboxed, B0), Why))
    ;   call(Which, C2)
    ).

% Rewrites a goal so that every goal it calls is checked: goals held in variables when they
% are called, closures when they are called with their arguments, asserted clauses' bodies.
'$tea_guard'(G, '$tea_safe_call'(G)) :- var(G), !.
'$tea_guard'(M:G, M:G) :- !.
'$tea_guard'((A, B), (GA, GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'((A ; B), (GA ; GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'((A -> B), (GA -> GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'(\+ A, \+ GA) :- !, '$tea_guard'(A, GA).
'$tea_guard'(format(S, F, A), '$tea_format'(S, F, A)) :- !.
'$tea_guard'(format(F, A), '$tea_format'(F, A)) :- !.
'$tea_guard'(G, '$tea_assert'(F, C)) :- callable(G), G =.. [F, C], member(F, [assertz, asserta, assert]), !.
'$tea_guard'(G, Guarded) :-
    callable(G), functor(G, F, N), '$tea_meta_spec'(F, N, Specs), !,
    G =.. [F|Args],
    maplist('$tea_guard_arg', Specs, Args, NewArgs),
    Guarded =.. [F|NewArgs].
'$tea_guard'(G, G).

'$tea_guard_arg'(-, A, A).
'$tea_guard_arg'(0, A, G) :- '$tea_guard'(A, G).
'$tea_guard_arg'(^, A, G) :-
    (   nonvar(A), A = V^B -> G = V^GB, '$tea_guard_arg'(^, B, GB)
    ;   '$tea_guard'(A, G)
    ).
'$tea_guard_arg'(c, A, A).
'$tea_guard_arg'(N, A, '$tea_checked'(A)) :- integer(N), N > 0.

% --- Running a block ------------------------------------------------------------------------------

% '$tea_run'(+State, +Clauses, +Limit, -Result): State is a list Key=Value; Result is
% ok(Returns) (Key=Value, in the order written), failed(Line), error(Line, Message) or
% limit(Line).
'$tea_run'(State, Clauses, Limit, Result) :- '$tea_run'(block, State, Clauses, Limit, Result).

% Mode block: ok(Returns); mode query (prolog.query): ok(Bindings), the variables of the last
% query that succeeded, Name=Value.
'$tea_run'(Mode, State, Clauses, Limit, Result) :-
    '$tea_forget',
    forall(member(K=V, State), assertz(state(K, V))),
    (   catch('$tea_clauses'(Clauses, Limit, Result0), E, Result0 = error(0, E))
    ->  true
    ;   Result0 = failed(0)
    ),
    (   Result0 == ok, Mode == query
    ->  ( '$tea_bindings'(Bs) -> Result = ok(Bs) ; Result = ok([]) )
    ;   Result0 == ok
    ->  findall(K1=J, ('$tea_return'(K0, V0), '$tea_key'(K0, K1), '$tea_json'(V0, J)), Returns),
        Result = ok(Returns)
    ;   Result0 = error(Line, E1), \+ atom(E1)
    ->  '$tea_describe'(E1, Message), Result = error(Line, Message)
    ;   Result = Result0
    ),
    '$tea_forget'.

'$tea_clauses'([], _, ok).
'$tea_clauses'([c(Line, Codes)|Cs], Limit, Result) :-
    '$tea_read'(Codes, Term, Vs, Error),
    (   Error \== none
    ->  Result = error(Line, Error)
    ;   '$tea_kind'(Term, Kind),
        catch('$tea_do'(Kind, Line, Limit, R), E, R = error(Line, E)),
        (   R == ok, Kind = query(_)
        ->  retractall('$tea_bindings'(_)),
            findall(N=J, ( member(N=V, Vs), \+ atom_chars(N, ['_'|_]), '$tea_json'(V, J) ), Bs),
            assertz('$tea_bindings'(Bs))
        ;   true
        ),
        (   R == ok -> '$tea_clauses'(Cs, Limit, Result)
        ;   Result = R
        )
    ).

'$tea_do'(fact(Head), _, _, ok) :- assertz(Head).
'$tea_do'(rule(Head, Body), _, _, ok) :- '$tea_guard'(Body, Guarded), assertz((Head :- Guarded)).
'$tea_do'(directive(dynamic(Spec)), _, _, ok) :- !, '$tea_declare'(Spec).
'$tea_do'(directive(Body), Line, Limit, R) :-
    (   '$tea_quiet_directive'(Body) -> R = ok
    ;   '$tea_do'(query(Body), Line, Limit, R)
    ).
'$tea_do'(query(Goal), Line, Limit, R) :-
    '$tea_guard'(Goal, Guarded),
    (   catch(call_with_inference_limit(Guarded, Limit, Outcome), E, (Outcome = thrown(E)))
    ->  (   Outcome == inference_limit_exceeded -> R = limit(Line)
        ;   Outcome = thrown(E1) -> R = error(Line, E1)
        ;   R = ok
        )
    ;   R = failed(Line)
    ).

% `:- dynamic(F/N)`: F/N is defined with no clauses, so calling it fails instead of raising an
% existence error (as in SWI-Prolog; each run asserts its clauses as dynamic ones anyway).
'$tea_declare'(Spec) :- var(Spec), !.
'$tea_declare'((A, B)) :- !, '$tea_declare'(A), '$tea_declare'(B).
'$tea_declare'([]) :- !.
'$tea_declare'([S|Ss]) :- !, '$tea_declare'(S), '$tea_declare'(Ss).
'$tea_declare'(F/N) :-
    atom(F), integer(N), N >= 0, !,
    functor(H, F, N),
    (   catch(predicate_property(H, dynamic), _, fail) -> true
    ;   catch((assertz(H), retract(H)), _, true)
    ).
'$tea_declare'(_).

'$tea_quiet_directive'(use_module(_)).
'$tea_quiet_directive'(use_module(_, _)).
'$tea_quiet_directive'(ensure_loaded(_)).
'$tea_quiet_directive'(dynamic(_)).
'$tea_quiet_directive'(discontiguous(_)).
'$tea_quiet_directive'(table(_)).
'$tea_quiet_directive'(set_prolog_flag(double_quotes, _)).

% Every clause a run asserted (the block's facts and rules, what its queries asserted, the
% state and the returns): all dynamic predicates of the user module are emptied.
'$tea_forget' :-
    forall(( current_predicate(F/N), functor(H, F, N), catch(predicate_property(H, dynamic), _, fail) ),
           catch(retractall(H), _, true)).

'$tea_key'(K, K) :- atom(K), !.
'$tea_key'(K, A) :- '$tea_json'(K, J), ( atom(J) -> A = J ; '$tea_text'(J, A) ).

% A value returned, as the JSON the Rust side reads: numbers, atoms (true, false and null are
% JSON's), chars (a string), lists, json([Key=Value, …]) (an object); anything else as its text.
'$tea_json'(V, null) :- var(V), !.
'$tea_json'(V, V) :- number(V), !.
'$tea_json'([], []) :- !.
'$tea_json'(V, V) :- atom(V), !.
'$tea_json'(V, s(V)) :- '$tea_chars'(V), !.
'$tea_json'(json(Pairs), json(Js)) :- is_list(Pairs), '$tea_pairs'(Pairs, Js), !.
'$tea_json'(V, J) :- is_list(V), !, maplist('$tea_json', V, J).
'$tea_json'(V, A) :- '$tea_text'(V, A).

'$tea_chars'([C|Cs]) :- is_list(Cs), maplist('$tea_char', [C|Cs]).
'$tea_char'(C) :- atom(C), atom_length(C, 1).

'$tea_pairs'([], []).
'$tea_pairs'([P|Ps], [K=J|Js]) :-
    nonvar(P), ( P = (K0=V) ; P = (K0-V) ; P = (K0:V) ), !,
    '$tea_key'(K0, K), '$tea_json'(V, J),
    '$tea_pairs'(Ps, Js).

% --- SWI-Prolog's predicates that The Edge Agent's blocks use --------------------------------------

'$tea_to_chars'(T, Cs) :-
    (   var(T) -> throw(error(instantiation_error, text/1))
    ;   atom(T) -> atom_chars(T, Cs)
    ;   number(T) -> number_chars(T, Cs)
    ;   is_list(T), maplist(atom, T) -> Cs = T
    ;   is_list(T) -> maplist('$tea_code_char', T, Cs)
    ;   throw(error(type_error(text, T), text/1))
    ).

string(S) :- '$tea_chars'(S).
is_list(L) :- var(L), !, fail.
is_list([]).
is_list([_|T]) :- is_list(T).
string_concat(A, B, C) :-
    (   nonvar(A), nonvar(B)
    ->  '$tea_to_chars'(A, As), '$tea_to_chars'(B, Bs), append(As, Bs, C)
    ;   '$tea_to_chars'(C, Cs), append(As, Bs, Cs), A = As, B = Bs
    ).
string_chars(S, Cs) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs) ; S = Cs ).
string_codes(S, Codes) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), maplist(char_code, Cs, Codes) ; maplist(char_code, S, Codes) ).
string_to_atom(S, A) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), atom_chars(A, Cs) ; atom_chars(A, S) ).
string_length(S, N) :- '$tea_to_chars'(S, Cs), length(Cs, N).
string_lower(S, L) :- '$tea_to_chars'(S, Cs), maplist('$tea_lower', Cs, L).
string_upper(S, U) :- '$tea_to_chars'(S, Cs), maplist('$tea_upper', Cs, U).
'$tea_code_char'(C0, C) :- ( integer(C0) -> char_code(C, C0) ; C = C0 ).
'$tea_lower'(C, L) :- ( char_type(C, upper(L0)) -> L = L0 ; L = C ).
'$tea_upper'(C, U) :- ( char_type(C, lower(U0)) -> U = U0 ; U = C ).
atom_string(A, S) :- ( nonvar(A) -> '$tea_to_chars'(A, S) ; '$tea_to_chars'(S, Cs), atom_chars(A, Cs) ).
number_string(N, S) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), number_chars(N, Cs) ; number_chars(N, S) ).
term_to_atom(T, A) :- ( nonvar(A) -> atom_chars(A, Cs), read_term_from_chars(Cs, T, []) ; '$tea_text'(T, A) ).
term_string(T, S) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), read_term_from_chars(Cs, T, []) ; write_term_to_chars(T, [quoted(true)], S) ).
sub_string(S, B, L, A, Sub) :-
    '$tea_to_chars'(S, Cs), atom_chars(SA, Cs),
    (   nonvar(Sub) -> '$tea_to_chars'(Sub, SubCs), atom_chars(SubA, SubCs) ; true ),
    sub_atom(SA, B, L, A, SubA),
    (   var(Sub) -> atom_chars(SubA, Sub) ; true ).
split_string(S, Sep, Pad, Parts) :-
    '$tea_to_chars'(S, Cs), '$tea_to_chars'(Sep, SepCs), '$tea_to_chars'(Pad, PadCs),
    '$tea_split'(Cs, SepCs, [], Raw),
    maplist('$tea_strip'(PadCs), Raw, Parts).
'$tea_split'([], _, Acc, [P]) :- reverse(Acc, P).
'$tea_split'([C|Cs], Seps, Acc, [P|Ps]) :- memberchk(C, Seps), !, reverse(Acc, P), '$tea_split'(Cs, Seps, [], Ps).
'$tea_split'([C|Cs], Seps, Acc, Ps) :- '$tea_split'(Cs, Seps, [C|Acc], Ps).
'$tea_strip'(Pad, Cs, S) :- '$tea_lstrip'(Pad, Cs, C1), reverse(C1, R1), '$tea_lstrip'(Pad, R1, R2), reverse(R2, S).
'$tea_lstrip'(Pad, [C|Cs], S) :- memberchk(C, Pad), !, '$tea_lstrip'(Pad, Cs, S).
'$tea_lstrip'(_, Cs, Cs).
atomic_list_concat(L, A) :- maplist('$tea_to_chars', L, Css), append(Css, Cs), atom_chars(A, Cs).
atomic_list_concat(L, Sep, A) :-
    (   ground(L)
    ->  '$tea_to_chars'(Sep, SepCs), maplist('$tea_to_chars', L, Css),
        '$tea_join'(Css, SepCs, Cs), atom_chars(A, Cs)
    ;   '$tea_to_chars'(A, Cs), '$tea_to_chars'(Sep, SepCs), SepCs = [S1|_],
        '$tea_split'(Cs, [S1], [], Parts), maplist('$tea_chars_atom', Parts, L)
    ).
'$tea_chars_atom'(P, X) :- atom_chars(X, P).
'$tea_join'([], _, []).
'$tea_join'([C], _, C) :- !.
'$tea_join'([C|Cs], Sep, Out) :- '$tea_join'(Cs, Sep, Rest), append(C, Sep, C1), append(C1, Rest, Out).
upcase_atom(A, U) :- '$tea_to_chars'(A, Cs), maplist('$tea_upper', Cs, Us), atom_chars(U, Us).
downcase_atom(A, L) :- '$tea_to_chars'(A, Cs), maplist('$tea_lower', Cs, Ls), atom_chars(L, Ls).
sumlist(L, S) :- sum_list(L, S).
writeln(T) :- write(T), nl.
print_message(_, _).
succ_or_fail(_).
last([X], X) :- !.
last([_|T], X) :- last(T, X).
aggregate_all(count, G, C) :- !, findall(x, G, L), length(L, C).
aggregate_all(count(T), G, C) :- !, findall(T, G, L), length(L, C).
aggregate_all(sum(E), G, S) :- !, findall(E, G, L), sum_list(L, S).
aggregate_all(max(E), G, M) :- !, findall(E, G, L), L \== [], max_list(L, M).
aggregate_all(min(E), G, M) :- !, findall(E, G, L), L \== [], min_list(L, M).
aggregate_all(bag(E), G, L) :- !, findall(E, G, L).
aggregate_all(set(E), G, S) :- !, findall(E, G, L), sort(L, S).
include(_, [], []).
include(P, [X|Xs], R) :- ( call(P, X) -> R = [X|R1] ; R = R1 ), include(P, Xs, R1).
exclude(_, [], []).
exclude(P, [X|Xs], R) :- ( call(P, X) -> R = R1 ; R = [X|R1] ), exclude(P, Xs, R1).
partition(_, [], [], []).
partition(P, [X|Xs], I, E) :- ( call(P, X) -> I = [X|I1], E = E1 ; I = I1, E = [X|E1] ), partition(P, Xs, I1, E1).
is_dict(json(_)).
get_dict(K, json(Pairs), V) :- member(P, Pairs), ( P = (K=V) ; P = (K-V) ; P = (K:V) ).
put_dict(K, json(Pairs), V, json(New)) :- '$tea_put'(Pairs, K, V, New).
'$tea_put'([], K, V, [K=V]).
'$tea_put'([P|Ps], K, V, [K=V|Ps]) :- ( P = (K0=_) ; P = (K0-_) ; P = (K0:_) ), K0 == K, !.
'$tea_put'([P|Ps], K, V, [P|Ns]) :- '$tea_put'(Ps, K, V, Ns).
dict_pairs(json(Pairs), _, KVs) :- nonvar(Pairs), !, findall(K-V, get_dict(K, json(Pairs), V), KVs0), keysort(KVs0, KVs).
dict_pairs(json(Pairs), _, KVs) :- findall(K=V, member(K-V, KVs), Pairs).
msort(L, S) :- maplist('$tea_pair', L, Ps), keysort(Ps, Sorted), maplist('$tea_pair', S, Sorted).
'$tea_pair'(X, X-x).
max_list([X|Xs], M) :- foldl('$tea_max', Xs, X, M).
min_list([X|Xs], M) :- foldl('$tea_min', Xs, X, M).
'$tea_max'(X, M0, M) :- M is max(X, M0).
'$tea_min'(X, M0, M) :- M is min(X, M0).
max_member(M, [X|Xs]) :- foldl('$tea_max_member', Xs, X, M).
min_member(M, [X|Xs]) :- foldl('$tea_min_member', Xs, X, M).
'$tea_max_member'(X, M0, M) :- ( X @> M0 -> M = X ; M = M0 ).
'$tea_min_member'(X, M0, M) :- ( X @< M0 -> M = X ; M = M0 ).
subtract([], _, []).
subtract([X|Xs], Ys, R) :- ( memberchk(X, Ys) -> R = R1 ; R = [X|R1] ), subtract(Xs, Ys, R1).
delete([], _, []).
delete([X|Xs], D, R) :- ( X \= D -> R = [X|R1] ; R = R1 ), delete(Xs, D, R1).
plus(A, B, C) :- ( nonvar(A), nonvar(B) -> C is A + B ; nonvar(A), nonvar(C) -> B is C - A ; A is C - B ).
atom_number(A, N) :- atom(A), atom_chars(A, Cs), catch(number_chars(N, Cs), _, fail).
tab(N) :- forall(between(1, N, _), write(' ')).
print(T) :- write(T).
ignore(G) :- ( call(G) -> true ; true ).
atom_to_term(A, T, Bindings) :- '$tea_to_chars'(A, Cs), read_term_from_chars(Cs, T, [variable_names(Bindings)]).
nb_setval(K, V) :- retractall('$tea_global'(K, _)), assertz('$tea_global'(K, V)).
b_setval(K, V) :- nb_setval(K, V).
nb_getval(K, V) :- '$tea_global'(K, V0), !, V = V0.
b_getval(K, V) :- nb_getval(K, V).

% SWI-Prolog's format/2 with an atom as the format, and format/3 into atom(A), string(S),
% codes(Cs) or chars(Cs) (no other stream: the sandbox refuses it).
'$tea_sink'(S) :- nonvar(S), ( S = atom(_) ; S = string(_) ; S = codes(_) ; S = chars(_) ), !.
'$tea_format'(F, As) :- '$tea_to_chars'(F, Fs), ( is_list(As) -> As1 = As ; As1 = [As] ), format(Fs, As1).
'$tea_format'(Sink, F, As) :-
    (   '$tea_sink'(Sink) -> true ; throw(error(permission_error(output, stream, Sink), format/3)) ),
    '$tea_to_chars'(F, Fs), ( is_list(As) -> As1 = As ; As1 = [As] ),
    phrase(format_(Fs, As1), Cs),
    (   Sink = atom(A) -> atom_chars(A, Cs)
    ;   Sink = string(S) -> S = Cs
    ;   Sink = codes(C) -> maplist(char_code, Cs, C)
    ;   Sink = chars(C) -> C = Cs
    ).
